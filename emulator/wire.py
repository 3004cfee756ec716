"""The emulator's wire format: the provider contract it serves (adapters/providers/emulator_api.py,
where the EmulatorProvider reads it) and its own test hooks (`/_sim/...`)."""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from adapters.providers.emulator_api import ErrorOut, JobOut

# The content filter: a job whose prompt holds this word fails moderation (SAFETY.INPUT.TEXT).
MODERATED_WORD = "forbidden-content"

WAITING: tuple[str, ...] = ("queued", "throttled")  # jobs that count towards max_queued
ALIVE: tuple[str, ...] = (*WAITING, "running")
TERMINAL: frozenset[str] = frozenset({"succeeded", "failed", "canceled"})


class SimJobOut(JobOut):
    """A job as the test hooks see it: plus how often its video was produced (rendered or taken
    from the render cache), how far that is (`render_state`: None, "rendering", "done": its input
    image was fetched by then) and whether it was doomed."""

    renders: int
    render_state: str | None = None
    fail_injected: bool
    defect: str | None = None  # "black" / "frozen": injected by /_sim/faults
    webhook_url: str | None = None


class SimJobChange(BaseModel):
    """A change to one job behind the API's back (POST /_sim/jobs/{id}): what the provider does
    after the fact. `cost`: a succeeded job re-rated (what the listing and status calls report from
    now on); `finish_now`: a running job's time is up now (it ends once its clip is rendered)."""

    cost: float | None = Field(default=None, ge=0)
    finish_now: bool = False


class SimJobList(BaseModel):
    jobs: list[SimJobOut]


class SimStats(BaseModel):
    """What the emulator saw since it started (GET /_sim/stats)."""

    submits: int = 0
    sync_calls: int = 0  # calls answered at once, without a job (the OpenAI dialect's moderations)
    refused_429: int = 0
    jobs_created: int = 0
    max_alive: int = 0  # most jobs queued, throttled or running at once (measured at submit)
    max_running: int = 0  # most jobs running at once (measured at each start)
    status_calls: int = 0  # GET /v1/jobs/{id}
    status_calls_per_job: float = 0.0  # status_calls / jobs_created
    # The most status calls any one whole second of the emulator's clock saw (xx:05.000 to xx:05.999)
    status_calls_peak_per_s: int = 0
    webhooks_sent: int = 0  # deliveries answered 2xx (a duplicated event counts twice)
    webhooks_dropped: int = 0  # events given up on (attempts used up, or the send queue full)
    webhooks_refused: int = 0  # events answered 4xx (not 408/429): not retried
    # Webhook faults applied (see Faults):
    webhooks_duplicated: int = 0
    webhooks_reordered: int = 0
    webhooks_before_response: int = 0
    webhooks_dropped_injected: int = 0
    webhooks_bad_signature: int = 0
    webhooks_stale: int = 0
    renders: int = 0  # ffmpeg renders
    render_cache_hits: int = 0  # clips served from the render cache instead
    # Provider faults applied (counters and rates of Faults alike):
    submits_hung: int = 0  # job created, the answer held back (the client's outcome is unknown)
    injected_429: int = 0
    injected_5xx: int = 0
    output_urls_expired: int = 0  # output URLs handed out dead by a status call
    outage_refusals: int = 0  # calls answered 503 during an outage


class FaultRates(BaseModel):
    """Faults drawn at random, on top of the counters of Faults: each is the chance that one submit,
    output URL or webhook event gets it. Drawn from one RNG seeded when the rates are set, so a run
    with the same seed and the same order of calls gets the same faults."""

    seed: int | None = None
    submit_unknown: float = Field(default=0.0, ge=0, le=1)  # as submit_hang_after_create
    submit_429: float = Field(default=0.0, ge=0, le=1)  # refused without a job, Retry-After 1
    submit_5xx: float = Field(default=0.0, ge=0, le=1)  # 500, 502 or 503 without a job
    expire_output_url: float = Field(default=0.0, ge=0, le=1)  # as expire_output_urls
    duplicate_webhook: float = Field(default=0.0, ge=0, le=1)
    reorder_webhook: float = Field(default=0.0, ge=0, le=1)
    drop_webhook: float = Field(default=0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _one_status_per_submit(self) -> FaultRates:
        if self.submit_429 + self.submit_5xx > 1:
            raise ValueError("submit_429 + submit_5xx must be at most 1")
        return self


class Faults(BaseModel):
    """Pending injected faults and runtime tuning (POST sets the given ones, DELETE resets all)."""

    # The API the faults are for: a provider dialect's prefix (runway, kling, ...) or "emulator" (the
    # emulator's own /v1 API); null: all of them. Tuning is for the whole emulator only.
    dialect: str | None = Field(default=None, max_length=40)
    submit_hang_after_create: int = Field(default=0, ge=0)
    fail_next: int = Field(default=0, ge=0)
    submit_status: int | None = Field(default=None, ge=400, le=599)
    submit_status_count: int = Field(default=0, ge=0)
    # Runtime tuning; null means the configured value (--job-seconds, --job-jitter, ...).
    # job_seconds and job_jitter apply to jobs that start running while set.
    job_seconds: float | None = Field(default=None, ge=0)
    job_jitter: float | None = Field(default=None, ge=0, lt=1)
    max_running: int | None = Field(default=None, ge=1)
    max_queued: int | None = Field(default=None, ge=1)
    # While set, running jobs do not end when their time is up (they end once it is set back to false):
    # a test holds many jobs running at once however slowly its tasks submit them.
    hold_running: bool = False
    # Outages: for the next N seconds the call answers 503 (a provider-style error body); all four
    # at once are a total outage.
    submit_outage_s: float = Field(default=0.0, ge=0)
    cancel_outage_s: float = Field(default=0.0, ge=0)
    status_outage_s: float = Field(default=0.0, ge=0)
    list_outage_s: float = Field(default=0.0, ge=0)
    # For the next N seconds the job status call answers 404, as for a job the provider lost.
    status_missing_s: float = Field(default=0.0, ge=0)
    # For the next N seconds the cancel call answers 404 (a provider refusing to answer for a job).
    cancel_missing_s: float = Field(default=0.0, ge=0)
    # The next N cancel calls answer the job `canceled` while it runs on to its end and bills (a
    # provider whose cancel is acknowledged before it reaches the worker, which finishes the job).
    cancel_lost_race: int = Field(default=0, ge=0)
    # Webhook faults, each for the next N events (submits for webhook_before_response):
    duplicate_webhook: int = Field(default=0, ge=0)  # delivered twice, same webhook-id
    reorder_webhooks: int = Field(default=0, ge=0)  # held back until the job's next event went out
    webhook_before_response: int = Field(default=0, ge=0)  # the job's first event sent before the 201
    drop_webhook: int = Field(default=0, ge=0)  # never sent
    drop_all_webhooks: bool = False  # no webhook is sent while set
    bad_signature: int = Field(default=0, ge=0)  # signed with a key that is not the webhook secret
    stale_timestamp: int = Field(default=0, ge=0)  # webhook-timestamp 10 minutes in the past
    # Output URLs: the next N handed out by a status call die at once (signing key rotated right
    # after the answer), though their expires_at still shows the normal lifetime; a later status
    # call hands out a working URL again.
    expire_output_urls: int = Field(default=0, ge=0)
    # Defective videos, each for the next N jobs: the job succeeds, its clip is all black, or one
    # still frame for its whole duration (what the review's automatic checks must catch).
    black_video: int = Field(default=0, ge=0)
    frozen_video: int = Field(default=0, ge=0)
    # Chances per submit / URL / event; setting them (re)seeds the RNG they are drawn from.
    rates: FaultRates = Field(default_factory=FaultRates)


class ApiErrorBody(BaseModel):
    error: ErrorOut
