"""Custom search attributes (registered on the Temporal server by `reelqueue dev up`)."""

from temporalio.common import SearchAttributeKey

TASK_STATUS = SearchAttributeKey.for_keyword("TaskStatus")
IMPORT_ID = SearchAttributeKey.for_keyword("ImportId")
PRODUCT_ID = SearchAttributeKey.for_keyword("ProductId")
LOCALE = SearchAttributeKey.for_keyword("Locale")
ASPECT_RATIO = SearchAttributeKey.for_keyword("AspectRatio")
PROVIDER = SearchAttributeKey.for_keyword("Provider")

ALL = (TASK_STATUS, IMPORT_ID, PRODUCT_ID, LOCALE, ASPECT_RATIO, PROVIDER)
