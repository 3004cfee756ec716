"""Custom search attributes (registered on the Temporal server by `reelqueue temporal setup`, which
`reelqueue dev up` runs too)."""

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.common import SearchAttributeKey

TASK_STATUS = SearchAttributeKey.for_keyword("TaskStatus")
IMPORT_ID = SearchAttributeKey.for_keyword("ImportId")
PRODUCT_ID = SearchAttributeKey.for_keyword("ProductId")
LOCALE = SearchAttributeKey.for_keyword("Locale")
ASPECT_RATIO = SearchAttributeKey.for_keyword("AspectRatio")
PROVIDER = SearchAttributeKey.for_keyword("Provider")

ALL = (TASK_STATUS, IMPORT_ID, PRODUCT_ID, LOCALE, ASPECT_RATIO, PROVIDER)


def type_name(value: int) -> str:
    """INDEXED_VALUE_TYPE_KEYWORD_LIST -> KeywordList: the type names the `temporal` and `tcld` CLIs take."""
    words = IndexedValueType.Name(value).removeprefix("INDEXED_VALUE_TYPE_").split("_")  # type: ignore[arg-type]
    return "".join(word.capitalize() for word in words)
