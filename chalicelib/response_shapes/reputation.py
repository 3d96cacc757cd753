"""Shapes of the reputation guard's and the infrastructure signals' answers
(services/reputation/): a server's guard, the signals of an address, a pool or a domain."""
from datetime import datetime
from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict

from chalicelib.response_shapes import record


@record
class ReputationBrief(TypedDict):
    """The reputation guard's state of a server, as its record shows it."""

    state: Annotated[str, Field(description=(
        "ok; warning (a rate at or above a warning threshold); paused (the guard suspended "
        "the server's sending: an instance admin lifts it with POST .../unsuspend)"))]
    reason: Annotated[str | None, Field(description="Why it warns or paused, in words.")]
    since: Annotated[datetime | None, Field(description="When the warning or pause began.")]


@record
class ReputationThresholds(TypedDict):
    """The installation's thresholds, in percent (REPUTATION_*_PERCENT)."""

    bounce_warning: float
    bounce_pause: float
    complaint_warning: float
    complaint_pause: float


@record
class ReputationFinding(TypedDict):
    """A rate at or above a threshold (on at least ``min_volume`` messages)."""

    metric: Annotated[str, Field(description="bounce_rate or complaint_rate")]
    level: Annotated[str, Field(description="warning or pause")]
    rate: Annotated[float, Field(description="Percent.")]
    threshold: Annotated[float, Field(description="Percent.")]
    volume: Annotated[int, Field(description="The messages the rate is of.")]
    message: str


@record
class Reputation(TypedDict):
    """GET .../servers/{server}/reputation: the guard's view of the server now."""

    state: Annotated[str, Field(description="ok, warning or paused (as last evaluated)")]
    guard: Annotated[str, Field(description="REPUTATION_GUARD: pause, warn or off")]
    window_hours: int
    since: Annotated[datetime, Field(description=(
        "Where the window starts: its oldest whole hour, or the lift of the last pause."))]
    min_volume: Annotated[int, Field(description="Messages before a rate is judged.")]
    enough_volume: bool
    sent: Annotated[int, Field(description=(
        "Messages with a final delivery outcome in the window (sent or failed for good)."))]
    delivered: Annotated[int, Field(description="Of those, accepted by the receiver.")]
    bounces: Annotated[int, Field(description=(
        "Bounces saying the address is bad (refused at delivery or a DSN), once per "
        "message."))]
    complaints: Annotated[int, Field(description="Spam complaints, once per message.")]
    bounce_rate: Annotated[float | None, Field(description="bounces / sent, percent.")]
    complaint_rate: Annotated[float | None, Field(description="complaints / delivered, "
                                                              "percent.")]
    thresholds: ReputationThresholds
    findings: list[ReputationFinding]
    reason: str | None
    warning_since: datetime | None
    paused_at: datetime | None
    lifted_at: datetime | None
    lifted_by: str | None
    evaluated_at: datetime | None


@record
class InfrastructureSignal(TypedDict):
    """A refusal that blamed the sending IP address or domain."""

    id: int
    created_at: datetime
    blames: Annotated[str, Field(description="ip or domain")]
    reason: Annotated[str, Field(description=(
        "The failure's reason (docs/api.md, failure reasons): block_list, ip_reputation, "
        "ptr_required, domain_reputation, authentication, sender_refused"))]
    origin: Annotated[str, Field(description="delivery (an SMTP reply) or bounce (a DSN)")]
    source_address: Annotated[str | None, Field(description=(
        "The IP address the mail left from; null: no pool (the system's choice)."))]
    ip_pool_id: int | None
    domain: Annotated[str | None, Field(description="The sending domain.")]
    server_id: int
    message_id: Annotated[int | None, Field(description="The message refused (null once "
                                                        "deleted by retention).")]
    receiver: Annotated[str | None, Field(description=(
        "Who said it: the MX host, or the bounce's Remote-MTA (else Reporting-MTA)."))]
    code: Annotated[int | None, Field(description="The SMTP reply code.")]
    status: Annotated[str | None, Field(description="The enhanced status code.")]
    text: Annotated[str | None, Field(description="The reply or diagnostic, as said.")]


@record
class SignalReceiver(TypedDict):
    """One receiver's refusals in the window, with the latest."""

    receiver: str | None
    count: int
    last_at: datetime
    latest: InfrastructureSignal


@record
class SignalHealth(TypedDict):
    """Refusals that blamed an address, a pool or a domain in the last ``window_hours``."""

    window_hours: int
    since: datetime
    count: int
    ip: Annotated[int, Field(description="Of them, blaming the IP address.")]
    domain: Annotated[int, Field(description="Of them, blaming the domain.")]
    last_at: datetime | None
    receivers: Annotated[list[SignalReceiver], Field(description=(
        "The receivers that said it, the most frequent first (at most 5)."))]
