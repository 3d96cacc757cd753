"""Shapes of the management surface's answers (/api/v2/admin): organizations, servers,
domains with their DNS records, credentials, IP pools, admin API keys, suppressions, inbound
routes, webhooks with their queue and log, and the audit trail."""
from datetime import datetime
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from chalicelib.response_shapes import record
from chalicelib.response_shapes.reputation import ReputationBrief, SignalHealth


@record
class Organization(TypedDict):
    id: int
    uuid: str
    name: str
    permalink: str
    time_zone: str
    created_at: datetime
    updated_at: datetime | None


@record
class SendLimits(TypedDict):
    """The server's send limits with this hour's and day's use."""

    action: str
    per_hour: NotRequired[int | None]
    used_this_hour: NotRequired[int | None]
    hour_resets_at: NotRequired[datetime]
    per_day: NotRequired[int | None]
    used_this_day: NotRequired[int | None]
    day_resets_at: NotRequired[datetime]


@record
class Server(TypedDict):
    id: int
    uuid: str
    name: str
    permalink: str
    organization: Annotated[str | None, Field(description="The organization's permalink.")]
    mode: str
    suspended: bool
    suspended_at: datetime | None
    suspension_reason: str | None
    ip_pool_id: int | None
    track_opens: bool
    track_clicks: bool
    message_retention_days: int
    content_retention_days: Annotated[int, Field(description=(
        "Days its messages' content (raw source, signed copy) is kept, at most "
        "message_retention_days; after it the content is erased and reads of it answer "
        "ContentExpired while the record stays."))]
    send_limit_per_hour: int | None
    send_limit_per_day: int | None
    send_limit_action: Annotated[str, Field(description="hold or reject")]
    send_limits: SendLimits
    reputation: Annotated[ReputationBrief, Field(description=(
        "The reputation guard's state (GET .../reputation has its figures)."))]
    created_at: datetime
    updated_at: datetime | None


@record
class DnsRecord(TypedDict):
    type: Annotated[str, Field(description="TXT")]
    name: str
    value: str


@record
class DnsRecords(TypedDict):
    """The records a domain's owner publishes: verification, SPF, DKIM, the return-path
    CNAME and DMARC (its rua is the domain's report address); the next DKIM key's record
    during a rotation, the tracking CNAME when a tracking host is set. One record is not the
    owner's: ``dmarc_report_authorization`` (RFC 7489 7.1), in the installation's zone, which
    its operator publishes (once, as a wildcard, for every domain)."""

    verification: DnsRecord
    spf: DnsRecord
    dkim: DnsRecord
    dkim_next: NotRequired[DnsRecord]
    return_path: DnsRecord
    tracking: NotRequired[DnsRecord]
    dmarc: DnsRecord
    dmarc_report_authorization: NotRequired[DnsRecord]


@record
class HostName(TypedDict):
    """A custom return-path or tracking host of a domain and whether its CNAME is verified."""

    host: str
    name: str
    verified: bool
    verified_at: datetime | None


@record
class DkimKey(TypedDict):
    selector: str
    state: Annotated[str, Field(description="active, pending or retiring")]
    record: DnsRecord
    created_at: datetime | None
    retire_at: datetime | None


@record
class DnsCheckRecord(TypedDict):
    """One looked-up record: status ok, missing, mismatch or error."""

    kind: str
    address: NotRequired[Annotated[str, Field(
        description="The IP address a sending address's check is about.")]]
    name: str
    type: str
    expected: str | None
    found: list[str] | None
    status: str
    detail: str | None
    selector: NotRequired[str]
    state: NotRequired[str]
    policy: NotRequired[str | None]
    lookups: NotRequired[int]
    lost_at: NotRequired[str]


@record
class DnsCheckSummary(TypedDict):
    checked_at: datetime
    problems: int
    records: list[DnsCheckRecord]


@record
class DnsCheck(TypedDict):
    """GET .../domains/{name}/check."""

    domain: str
    checked_at: datetime | None
    ok: bool
    problems: int
    records: list[DnsCheckRecord]


@record
class Domain(TypedDict):
    id: int
    uuid: str
    name: str
    verified: bool
    verified_at: datetime | None
    dkim_selector: str
    track_opens: bool
    track_clicks: bool
    return_path: HostName
    tracking: HostName | None
    dkim_keys: list[DkimKey]
    dns_records: DnsRecords
    dns_check: DnsCheckSummary | None
    signals: Annotated[SignalHealth, Field(description=(
        "Refusals of its mail that blamed the sending IP or the domain, recently "
        "(GET .../signals lists them)."))]
    created_at: datetime


@record
class Credential(TypedDict):
    """A server credential; ``key`` only in the answer that creates it."""

    id: int
    uuid: str
    type: Annotated[str, Field(description="API, SMTP or SMTP-IP")]
    name: str
    hold: bool
    key_hint: str | None
    ip_range: str | None
    last_used_at: datetime | None
    created_at: datetime
    updated_at: datetime | None
    key: NotRequired[Annotated[str | None, Field(description="Shown once, at creation.")]]


@record
class IPAddress(TypedDict):
    id: int
    ip_pool_id: int
    ipv4: str | None
    ipv6: str | None
    hostname: str
    priority: int
    dns_check: Annotated[DnsCheckSummary | None, Field(
        description="The last reverse-DNS check (PTR, forward confirmation, HELO match) "
                    "of the address; null until it is first checked.")]
    signals: Annotated[SignalHealth, Field(description=(
        "Refusals of mail sent from this address that blamed it (block lists, reputation, "
        "reverse DNS) or its sending domain, recently."))]
    created_at: datetime


@record
class IPPool(TypedDict):
    """An IP pool; shown with its addresses (lists and deletes leave them out)."""

    id: int
    uuid: str
    name: str
    default: bool
    relay_host: Annotated[str | None, Field(description=(
        "host:port of the MTA that sends this pool's mail from its addresses, used when the "
        "delivering host owns none of them (IP_POOL_EGRESS); null: none."))]
    created_at: datetime
    ip_addresses: NotRequired[list[IPAddress] | None]
    signals: NotRequired[Annotated[SignalHealth, Field(description=(
        "Refusals of mail sent from the pool that blamed the IP or the sending domain, "
        "recently (shown with the addresses)."))]]


@record
class AdminApiKey(TypedDict):
    """An admin API key; ``key`` only in the answer that creates it."""

    id: int
    uuid: str
    name: str
    key_hint: str
    seeded: bool
    last_used_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    key: NotRequired[Annotated[str | None, Field(description="Shown once, at creation.")]]


@record
class Suppression(TypedDict):
    id: int
    address: str
    reason: Annotated[str, Field(description="HardBounce, SpamComplaint, Unsubscribe or Manual")]
    details: str | None
    stream: Annotated[str | None, Field(description="The stream's permalink; null: every stream.")]
    origin: str
    source: Annotated[str, Field(description="The same as origin (its earlier name).")]
    bounce_reason: Annotated[str | None, Field(description=(
        "For an entry a failure or a bounce added: the failure's reason (docs/api.md, "
        "failure reasons), e.g. no_such_user; null for other entries and older ones."))]
    message_id: Annotated[int | None, Field(description=(
        "For an entry a failure or a bounce added: the message whose failure added it "
        "(it may since have been deleted by retention)."))]
    created_at: datetime
    expires_at: datetime | None


@record
class SuppressionImportError(TypedDict):
    index: int
    field: str
    message: str


@record
class SuppressionImportResult(TypedDict):
    """POST .../suppressions/import."""

    imported: int
    skipped: int
    errors: list[SuppressionImportError]


@record
class SuppressionDeleted(TypedDict):
    """DELETE .../suppressions/{address}: the first entry removed and how many were."""

    suppression: Suppression
    removed: int
    deleted: bool


@record
class Route(TypedDict):
    id: int
    uuid: str
    name: Annotated[str, Field(description="The local part, or *.")]
    domain: str | None
    address: str
    mode: str
    endpoint: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime | None


@record
class Webhook(TypedDict):
    id: int
    uuid: str
    name: str
    url: str
    events: Annotated[list[str], Field(description="Event names; empty means all.")]
    sign: bool
    enabled: bool
    headers: Annotated[dict[str, str],
                       Field(description="Custom header names; values always masked.")]
    last_used_at: datetime | None
    created_at: datetime
    updated_at: datetime | None


@record
class WebhookRequest(TypedDict):
    """A pending notification of a webhook's queue."""

    id: int
    event: str
    uuid: str
    message_id: int | None
    attempts: int
    next_attempt_at: datetime
    in_progress: bool
    created_at: datetime
    payload: Annotated[dict[str, Any], Field(description="The notification's body, as it is sent.")]


@record
class WebhookLog(TypedDict):
    """One delivery attempt of a webhook."""

    id: int
    event: str
    uuid: str
    url: str
    attempt: int
    status_code: int | None
    success: bool
    response_body: str | None
    error: str | None
    duration_ms: int | None
    will_retry: bool
    next_attempt_at: datetime | None
    created_at: datetime


@record
class WebhookTestResult(TypedDict):
    event: str
    uuid: str
    url: str
    status_code: int | None
    success: bool
    response_body: str | None
    error: str | None
    duration_ms: int | None


@record
class WebhookTest(TypedDict):
    result: WebhookTestResult


@record
class AuthEvent(TypedDict):
    id: int
    event: str
    success: bool
    user_id: int | None
    email_address: str | None
    ip_address: str | None
    user_agent: str | None
    details: str | None
    created_at: datetime


@record
class AuthEvents(TypedDict):
    auth_events: list[AuthEvent]
    limit: int


# --- DMARC aggregate reports (services/dmarc/) -------------------------------------------------

@record
class DmarcPolicy(TypedDict):
    """The DMARC record the reporter found published (policy_published)."""

    domain: str
    adkim: str | None
    aspf: str | None
    p: str | None
    sp: str | None
    pct: str | None
    np: str | None
    fo: str | None


@record
class DmarcReport(TypedDict):
    """One aggregate report received for the domain."""

    id: int
    reporter: Annotated[str, Field(description="The reporting organization (org_name).")]
    reporter_email: str | None
    extra_contact: str | None
    report_id: Annotated[str, Field(description="The reporter's id of the report.")]
    begin_at: datetime
    end_at: datetime
    policy: DmarcPolicy
    errors: list[str]
    attachment: Annotated[str, Field(description="xml, gzip or zip")]
    mail_from: str | None
    messages: int
    passed: int
    failed: int
    received_at: datetime


@record
class DmarcDkimResult(TypedDict):
    domain: str | None
    selector: str | None
    result: str | None
    human_result: str | None


@record
class DmarcSpfResult(TypedDict):
    domain: str | None
    scope: str | None
    result: str | None


@record
class DmarcAuthResults(TypedDict):
    dkim: list[DmarcDkimResult]
    spf: list[DmarcSpfResult]


@record
class DmarcReason(TypedDict):
    type: str | None
    comment: str | None


@record
class DmarcRecord(TypedDict):
    """One row of a report: messages from one source with one set of results."""

    id: int
    report: Annotated[int, Field(description="The id of the report it came in.")]
    reporter: str
    begin_at: datetime
    source_ip: str
    ours: bool
    known_as: Annotated[str | None, Field(
        description="Which of our sending addresses the source is (IP pool, relay, "
                    "DMARC_KNOWN_SOURCES); null when it is not ours.")]
    count: int
    disposition: Annotated[str, Field(description="none, quarantine or reject")]
    dmarc: Annotated[str, Field(description="pass when SPF or DKIM passed aligned, else fail")]
    spf_aligned: bool
    dkim_aligned: bool
    spf_result: str | None
    spf_domain: str | None
    dkim_result: str | None
    dkim_domain: str | None
    dkim_selector: str | None
    header_from: str | None
    envelope_from: str | None
    envelope_to: str | None
    reasons: list[DmarcReason]
    auth_results: DmarcAuthResults


@record
class DmarcSource(TypedDict):
    """A source address over the range: its messages, how many passed and were aligned."""

    source_ip: str
    ours: bool
    known_as: str | None
    messages: int
    passed: int
    failed: int
    spf_aligned: int
    dkim_aligned: int
    reporters: list[str]
    first_seen: datetime
    last_seen: datetime


@record
class DmarcDay(TypedDict):
    start: datetime
    messages: int
    passed: int
    failed: int


@record
class DmarcTotals(TypedDict):
    messages: int
    passed: int
    failed: int
    reports: int
    sources: int


@record
class DmarcSummary(TypedDict):
    """Messages reported per UTC day (the day each report's period begins), and totals."""

    from_: Annotated[datetime, Field(alias="from")]
    to: datetime
    report_address: Annotated[str, Field(description="Where this domain's reports are sent.")]
    totals: DmarcTotals
    buckets: list[DmarcDay]


@record
class DataRemoval(TypedDict):
    """What a data removal did (POST .../data_removal): counts of what was removed or
    changed, for the address (named by its hash only) on the servers of its scope. Running
    it again removes nothing more: its counts are then zero."""

    address_hash: Annotated[str, Field(description="sha256: and the hex SHA-256 of the "
                                                   "normalized address (the audit trail's)")]
    scope: Annotated[str, Field(description="server, organization or installation")]
    servers: int
    messages: Annotated[int, Field(description="messages whose personal fields were removed")]
    content_erased: Annotated[int, Field(description="messages whose content was erased now")]
    skipped_pending: Annotated[int, Field(description=(
        "messages left alone because work is still due for them; remove again later"))]
    events: int
    deliveries: int
    opens: int
    clicks: int
    webhook_requests: int
    webhook_logs: int
    suppressions_hashed: int
    suppressions_deleted: int
    recipient_failures: int
