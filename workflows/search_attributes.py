"""Custom search attributes (registered on the Temporal server by `reelqueue temporal setup`, which
`reelqueue dev up` runs too)."""

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.common import SearchAttributeKey

from contracts.task import TaskStatus

TASK_STATUS = SearchAttributeKey.for_keyword("TaskStatus")
IMPORT_ID = SearchAttributeKey.for_keyword("ImportId")
PRODUCT_ID = SearchAttributeKey.for_keyword("ProductId")
LOCALE = SearchAttributeKey.for_keyword("Locale")
ASPECT_RATIO = SearchAttributeKey.for_keyword("AspectRatio")
PROVIDER = SearchAttributeKey.for_keyword("Provider")

ALL = (TASK_STATUS, IMPORT_ID, PRODUCT_ID, LOCALE, ASPECT_RATIO, PROVIDER)

# The TaskStatus values a user filters on: where a task ended, and the two waits for a person. Every
# other status is a step of a task in progress, shown as RUNNING (the exact one is in Postgres and the
# workflow's `status` query): each upsert is a history event and a visibility write, so a task
# upserts once or twice (RUNNING, then its end) instead of at each step (coarse-status-v1).
SHOWN_AS_IS = frozenset({
    TaskStatus.CREATED, TaskStatus.NEEDS_ATTENTION, TaskStatus.REVIEW, TaskStatus.INVALID, TaskStatus.SUCCEEDED,
    TaskStatus.CANCELED, TaskStatus.REJECTED, TaskStatus.FAILED_FINAL, TaskStatus.EXPIRED,
})


def shown_status(status: TaskStatus) -> str:
    """The TaskStatus search attribute's value for a task in `status`."""
    return status.value if status in SHOWN_AS_IS else TaskStatus.RUNNING.value


def type_name(value: int) -> str:
    """INDEXED_VALUE_TYPE_KEYWORD_LIST -> KeywordList: the type names the `temporal` and `tcld` CLIs take."""
    words = IndexedValueType.Name(value).removeprefix("INDEXED_VALUE_TYPE_").split("_")  # type: ignore[arg-type]
    return "".join(word.capitalize() for word in words)
