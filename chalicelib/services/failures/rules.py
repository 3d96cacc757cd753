"""What the text of a reply or bounce says: ordered rules from wording to a reason, and the
enhanced status code table. The first rule that matches wins, so the specific comes before the
general (a block list named in a "5.1.1" reply is a block list; "sender address rejected:
domain not found" is about the sender, not the recipient's domain).

The wording is that of the MTAs and providers people meet (Postfix, Exim, Sendmail, qmail,
Courier, Exchange and Microsoft 365, Domino, Gmail, Yahoo, iCloud, GMX, Mail.ru, Amazon SES,
...). Rules describe how receivers phrase a condition, never one message.
"""
from __future__ import annotations

import re


def _rx(*alternatives: str) -> re.Pattern:
    return re.compile("|".join(f"(?:{a})" for a in alternatives), re.I)


# The words that name greylisting (the rule "greylisted" below, and delivery's pacing, which
# does not take a greylisting 4xx for a throttle).
GREYLISTING_WORDS = (r"gr[ae]y-?list", r"gr[ae]y ?listing", r"postgrey")
GREYLISTING = _rx(*GREYLISTING_WORDS)


# (reason, pattern), most specific first.
TEXT_RULES: tuple[tuple[str, re.Pattern], ...] = (
    # The envelope sender, not the recipient: before the address rules ("sender address
    # rejected: domain not found").
    ("sender_refused", _rx(
        r"sender address rejected", r"sender (?:address )?(?:verify|verification) failed",
        r"\bsender (?:is )?(?:rejected|denied|refused|blocked|not allowed|unknown|invalid)",
        r"(?:invalid|unknown|bad|unverifiable|unroutable) sender",
        r"mail from (?:address )?(?:rejected|refused|not (?:accepted|allowed))",
        r"return[- ]path (?:address )?(?:rejected|refused|invalid|not valid)",
        r"domain of sender address .{0,80}(?:does not (?:exist|resolve)|not found)",
        r"sender domain (?:must|does not|doesn't) (?:exist|resolve)",
        r"sender address (?:does not|doesn't) (?:exist|resolve)",
        r"your envelope sender", r"sender address has null mx",
        # mailing lists (Google Groups, in English and Japanese): the sender may not post
        r"(?:permission|not allowed|not authori[sz]ed) to post", r"投稿する権限",
        r"(?:are|is) not (?:a )?member",
        # Google Groups says it in the sender's language, with a link to its help
        r"\bgroups\.google\.com\b")),
    # The sending IP on a block list, and reputation (before spam and the address rules:
    # receivers answer them with 5.1.1, 5.7.1 and even "recipient rejected").
    ("domain_reputation", _rx(
        r"domain (?:has |with )?(?:a )?(?:poor|bad|low|negative) reputation",
        r"reputation of (?:the|your) (?:sending |sender(?:'s)? )?domain",
        r"(?:sending|sender|from|dkim) domain.{0,60}(?:reputation|blocked|blacklisted|"
        r"blocklisted|listed)",
        r"\bdbl\b", r"\buribl\b", r"\bsurbl\b", r"domain (?:is )?(?:black|block)listed",
        r"unsolicited mail originating from your dkim domain",
        r"domain .{0,60} has been (?:blocked|blacklisted|blocklisted)")),
    ("block_list", _rx(
        r"spamhaus", r"spamcop", r"barracuda ?(?:central|reputation|rbl)",
        r"b\.barracudacentral", r"\bsorbs\b", r"abuseat", r"\bcbl\b", r"\bpsbl\b",
        r"\bbl\.[a-z0-9-]+\.", r"\brbl\b", r"\bdnsbl\b", r"\brbls\b", r"blocked using",
        r"(?:black|block) ?list(?:ed)?", r"(?<!not )listed (?:at|on|in|by) ", r"on (?:our|a|the) block ?list",
        r"(?:ip|address|host|client).{0,40}(?:is |was )?(?:black|block)listed",
        r"\bS3150\b", r"\bS3140\b", r"\bRBL[- ]",
        r"www\.spamhaus", r"mailspike", r"uceprotect", r"junkemailfilter",
        r"blocked by (?:an? )?(?:dns|real-?time)", r"\bis an open relay")),
    ("ip_reputation", _rx(
        r"(?:ip|address|host|network).{0,40}(?:poor|bad|low|negative) reputation",
        r"(?:poor|bad|low|negative) reputation", r"reputation of (?:the|your) (?:sending )?ip",
        r"ip reputation", r"sender ?score", r"unsolicited mail originating from your ip",
        r"\b\d{1,3}(?:\.\d{1,3}){3}\]? (?:is |has been |was )?(?:blocked|banned|blacklisted)",
        r"(?:ip|address) .{0,40}(?:has been|is|was) (?:temporarily )?(?:blocked|banned)",
        r"messages from \[?\d{1,3}(?:\.\d{1,3}){3}\]? (?:weren't|were not|temporarily) ",
        r"\[ts0[1-4]\]", r"due to (?:excessive )?user complaints",
        r"client host \[?[\d.]+\]? (?:blocked|rejected)",
        r"ip .{0,30} (?:not allowed|refused|rejected)", r"connection (?:refused|rejected) "
        r"(?:due to|because of) (?:reputation|abuse)", r"\breputation\b")),
    # Content.
    ("virus", _rx(
        r"\bvirus(?:es)?\b", r"malware", r"\binfected\b", r"trojan", r"malicious", r"phishing",
        r"(?:dangerous|forbidden|prohibited|unsafe|executable) (?:attachment|content|file)",
        r"attachment .{0,40}(?:not allowed|prohibited|blocked)")),
    ("spam_content", _rx(
        r"spam", r"\bjunk\b", r"\buce\b", r"unsolicited", r"bulk (?:e-?)?mail",
        r"content (?:filter|rejected|not accepted|was rejected)",
        r"message content", r"considered (?:as )?(?:spam|junk|unsolicited)",
        r"looks like", r"suspicious", r"scored? (?:too high|as)", r"high (?:spam )?score",
        r"\bspf\b.{0,20}\bspam", r"filtered", r"message (?:was )?(?:rejected|refused) by "
        r"(?:our|the) (?:content|mail) ?filter")),
    # Authentication of the sending domain, and the sending IP's reverse DNS.
    ("authentication", _rx(
        r"\bdmarc\b", r"\bspf\b", r"\bdkim\b", r"sender policy framework",
        r"unauthenticated (?:e-?)?mail", r"not (?:properly )?authenticated",
        r"authentication (?:failed|failure|checks? failed|results)",
        r"domain-?keys", r"\barc\b (?:validation|failed)", r"fails? (?:the )?alignment",
        r"does not designate .{0,60} as permitted sender")),
    ("ptr_required", _rx(
        r"reverse (?:dns|lookup|hostname|name|record|mapping|resolution)", r"\bptr\b",
        r"\brdns\b", r"cannot find your (?:reverse )?hostname",
        r"(?:ip|client|host) .{0,40}(?:does not|doesn't|has no) (?:resolve|reverse|hostname)",
        r"no (?:reverse|ptr|hostname) (?:record|for)", r"fcrdns",
        r"not (?:have|has) (?:a )?(?:valid )?(?:reverse|ptr|hostname)",
        r"unresolvable (?:ip|address|client|host)", r"hostname (?:does not|doesn't) resolve",
        r"helo .{0,60}(?:does not|doesn't) (?:resolve|match)", r"forward-confirmed",
        r"unverif(?:i|y)able (?:sending )?ips?\b")),
    # The recipient's domain, then the mailbox.
    # A DNS failure that may pass (Postfix's "Host not found, try again" is DNS's TRY_AGAIN,
    # not NXDOMAIN): before the rules for a domain that does not exist.
    ("network", _rx(
        r"not found, try again", r"name service error .{0,80}try again", r"servfail",
        r"temporary (?:dns|lookup|name(?: service)?) (?:failure|error)")),
    ("domain_accepts_no_mail", _rx(
        r"null mx", r"accepts? no (?:e-?)?mail", r"does not accept (?:e-?)?mail(?! from)",
        r"domain (?:does not|doesn't) (?:receive|accept) (?:e-?)?mail",
        r"has no mx, a or aaaa", r"not accepting mail for this domain",
        r"indicated no smtp service")),
    ("no_such_domain", _rx(
        r"nxdomain", r"host (?:or domain name )?(?:unknown|not found)",
        r"domain (?:name )?(?:not found|does not exist|doesn't exist|is not valid|unknown)",
        r"no such domain", r"unknown domain", r"unrouteable mail domain",
        r"\bhost [\w-]+(?:\.[\w-]+)+ not found",
        r"^\W*(?:[\w-]+\.)+[a-z]{2,}\.? (?:does not|doesn't) exist",
        r"(?:name or service|hostname) not known", r"no mx (?:record|host)s?",
        r"domain (?:is )?not (?:hosted|served|configured|handled) (?:here|on this)",
        r"non-?existent (?:domain|host)", r"unknown host",
        r"domain .{0,60} (?:does not|doesn't) exist", r"bad destination system address",
        r"mx (?:lookup|record) .{0,30}(?:failed|not found)", r"unrouteable address")),
    ("mailbox_moved", _rx(
        r"has moved", r"(?:user|mailbox|address) moved", r"no forwarding address",
        r"forwarding address", r"changed (?:his|her|their|the) (?:e-?mail )?address",
        r"new (?:e-?mail )?address is", r"no longer (?:at|uses) this (?:e-?mail )?address")),
    ("mailbox_full", _rx(
        r"mail ?box (?:is )?(?:full|over ?quota|exceed)", r"over ?quota", r"quota (?:exceeded|full|"
        r"limit)", r"exceed(?:ed|s)? (?:the |their |its |his |her )?(?:storage|quota|mailbox)",
        r"mailbox size limit", r"full mailbox", r"user (?:is )?over (?:the )?quota",
        r"insufficient (?:disk )?space (?:in|for) (?:the )?(?:mailbox|user)",
        r"out of (?:storage|space)", r"not enough (?:storage|space)",
        r"storage (?:allocation|space|limit)", r"mailbox (?:has )?(?:reached|hit) ",
        r"disk quota", r"mailfolder is full", r"too many messages in (?:this|the) mailbox",
        r"user's (?:disk|mail) quota", r"inbox is full", r"account is full",
        r"(?:disk ?space|mail|storage|mailbox|account|user'?s?) quota",
        r"quota (?:violation|exceeded)", r"(?:does not|doesn't) have enough (?:disk )?space")),
    ("mailbox_disabled", _rx(
        r"(?:account|mailbox|user|address|recipient)(?: (?:has been|is|was))? "
        r"(?:temporarily )?(?:disabled|suspended|deactivated|inactive|locked|frozen|"
        r"on hold|blocked|closed|expired|discontinued|not active|deleted|terminated)",
        r"(?:disabled|suspended|inactive|deactivated|locked|closed|frozen) "
        r"(?:account|mailbox|user|recipient)",
        r"mailbox (?:is )?(?:not|temporarily) (?:available|accessible|active)",
        r"account (?:is )?(?:not|no longer) (?:available|active|in use)",
        r"not accepting (?:new )?messages",
        r"user (?:is )?(?:not|no longer) (?:active|available)", r"inactive",
        r"(?:has been )?disabled or discontinued", r"mailbox unavailable for this recipient")),
    ("no_such_user", _rx(
        r"user (?:unknown|not found|not exist)", r"unknown (?:user|recipient|mailbox|local[- ]?part|"
        r"address|account|alias)", r"no such (?:user|mailbox|recipient|account|address|person|"
        r"local user|addressee)",
        r"(?:mailbox|account|recipient|address|user|addressee|user ?name|e-?mail)"
        r"(?: name| address)? (?:does not|doesn't|did not|didn't|not) exist",
        r"(?:mailbox|account|recipient|address|user|addressee)(?: address)? "
        r"(?:is )?(?:unknown|not found|not valid|invalid|unavailable|not listed|"
        r"not recognized)",
        r"invalid (?:recipient|mailbox|address|user|account|addressee|e-?mail address)",
        r"no mailbox here", r"no (?:valid )?(?:such )?recipients?\b(?! allowed)",
        r"recipnotfound", r"recipient not found", r"not a valid (?:mailbox|recipient|user|address)",
        r"address (?:is )?not present", r"not (?:our|a known) (?:customer|user)",
        r"(?:mailbox|address|recipient|user) (?:is )?not (?:here|local|known)",
        r"doesn't have an? .{0,40} account", r"does not have an? .{0,40} account",
        r"unknown or illegal alias", r"bad recipient address syntax",
        r"recipient address rejected: access denied",
        r"no account (?:by that name|for|with)", r"(?:addressee|recipient) unknown",
        r"unknown mailbox", r"account that you tried to reach does not exist",
        r"could not be found", r"not listed in", r"user doesn't exist",
        r"mailbox (?:not found|unavailable|does not exist|invalid)",
        r"^\s*(?:5\d\d[ -])?(?:5\.\d\.\d+ )?(?:<[^>]+>)?\s*\.{0,3}\s*(?:user|recipient) unknown",
        r"non-?existent (?:user|mailbox|recipient|address|account)",
        r"(?:recipient|user|addressee) name (?:is )?not recognized",
        r"invalid (?:final )?(?:delivery )?user ?id",
        r"(?:does not|doesn't) have a final (?:e-?mail )?delivery point",
        r"no matches to nameserver query",
        # French, Spanish, German, Portuguese, Italian: "the address does not exist"
        r"(?:adresse|destinataire|utilisateur|bo[iî]te)[^.]{0,60}n'existe pas",
        r"(?:direcci[óo]n|usuario|buz[óo]n|destinatario|cuenta)[^.]{0,60}\bno existe",
        r"(?:adresse|empf[äa]nger|benutzer|postfach)[^.]{0,60}existiert nicht",
        r"(?:endere[çc]o|usu[áa]rio|destinat[áa]rio|conta)[^.]{0,60}n[ãa]o existe",
        r"(?:indirizzo|utente|destinatario|casella)[^.]{0,60}non esiste",
        r"(?:empf[äa]nger|benutzer|adresse) unbekannt",
        # Domino in Japanese: "not in the directory's list"
        r"ディレクトリのリストにありません")),
    ("message_too_large", _rx(
        r"message (?:size )?(?:is )?(?:too (?:big|large|long)|exceeds)", r"size limit",
        r"message (?:size|length) (?:exceeds|limit)", r"too (?:big|large) for",
        r"exceeds (?:the )?(?:maximum|max|allowed|fixed) (?:message )?size",
        r"message (?:file )?too big", r"mail size", r"size exceeds",
        r"maximum (?:incoming |allowed )?(?:message|mail) size")),
    ("greylisted", _rx(*GREYLISTING_WORDS, r"try again in \d+ (?:seconds|minutes)")),
    ("rate_limited", _rx(
        r"rate limit", r"rate-limit", r"too many (?:connections|concurrent|messages|mails|"
        r"sessions|simultaneous|recipients this|emails|requests)",
        r"throttl", r"slow down", r"sending rate", r"exceeded .{0,40}(?:rate|limit)",
        r"too much mail", r"temporarily deferred", r"connection limit", r"limit exceeded",
        r"too fast", r"receiving mail at a rate", r"rate that prevents",
        r"frequency limit",
        r"maximum number of (?:connections|messages)")),
    ("policy", _rx(
        r"relay(?:ing)? (?:denied|not permitted|not allowed|access denied|prohibited)",
        r"not permitted to relay", r"unable to relay", r"we do not relay", r"relay not",
        r"not configured to relay",
        r"administrative prohibition", r"prohibited", r"not authori[sz]ed",
        r"policy", r"access denied", r"(?:tls|starttls|encryption) (?:is )?required",
        r"must (?:issue|use) (?:a )?starttls", r"authentication required",
        r"blocked by (?:the )?(?:recipient|administrator|user)", r"refused to accept",
        r"not allowed", r"(?:request|message) (?:rejected|refused|denied)",
        r"not accepting (?:e-?)?mail from", r"(?:does not|doesn't) accept (?:e-?)?mail from",
        r"rejected by (?:the )?(?:recipient|administrator|recipient's)")),
    ("invalid_message", _rx(
        r"rfc ?(?:5322|2822|822|5321|2821)", r"not compliant", r"malformed",
        r"(?:invalid|bad|illegal|missing|duplicate) (?:header|message|from|date|message-id|"
        r"mime|encoding|character)", r"syntax error",
        r"(?:invalid|bad|illegal|missing|duplicate|malformed|too many) [\w-]*\s?headers?",
        r"\bno [\w-]+:? (?:header|field) (?:given|found|present)",
        r"without (?:an? )?[\w-]+:? (?:header|field)s?", r"bare (?:lf|cr)",
        r"line (?:too long|length)", r"8-?bit", r"content conversion", r"(?:mime|message) "
        r"(?:format|structure)", r"command (?:unrecognized|not recognized)",
        r"bad sequence of commands", r"invalid (?:command|argument)",
        r"(?:command|parameter) not implemented")),
    ("expired", _rx(
        r"retry (?:timeout|time) (?:exceeded|not reached for any host after a long)",
        r"(?:message|delivery) (?:time )?expired", r"delivery time expired",
        r"could not be delivered (?:for|within|after) .{0,20}(?:days|hours)",
        r"(?:was|has) not been delivered (?:for|within|after) .{0,20}(?:days|hours)",
        r"too long in (?:the )?queue", r"giving up", r"gave up", r"max(?:imum)? (?:queue|retry) "
        r"(?:time|lifetime)", r"queue ?(?:life)?time", r"expired after", r"\bexpired\b",
        r"retry period", r"unable to deliver .{0,40}(?:days|hours)",
        r"not (?:been )?delivered (?:for|within|after|in) .{0,20}(?:days|hours)",
        r"(?:allowed |maximum )?queue period", r"maximum delivery attempts",
        r"(?:failed|after) \d+ (?:delivery )?attempt", r"in the queue too long",
        r"(?:have|has) been failing for a long time")),
    ("network", _rx(
        r"connection (?:was )?(?:refused|reset|closed|dropped|timed out|lost|failed)",
        r"connection to .{0,60} (?:failed|refused|timed out)",
        r"(?:did not|didn't) respond", r"not responding", r"could not find a (?:gateway|route)",
        r"(?:unable|not able) to establish an? (?:smtp )?connection",
        r"(?:did not|didn't) accept our requests to connect", r"socket error",
        r"host (?:is )?not reachable",
        r"timed? ?out", r"timeout", r"could not connect", r"(?:can't|cannot|unable to) "
        r"connect", r"no route to host", r"network (?:is )?unreachable", r"lost connection",
        r"host (?:is )?unreachable", r"name service error", r"servfail",
        r"temporary (?:dns|lookup|name)", r"dns (?:error|failure|lookup failed|problem)",
        r"\bloop", r"too many hops", r"hop count", r"routing loop", r"tls (?:handshake|"
        r"negotiation) failed", r"ssl", r"broken pipe", r"no answer from", r"unreachable",
        r"conversation with .{0,60} (?:failed|timed out)")),
    ("system_error", _rx(
        r"system error", r"internal (?:server )?error", r"local error", r"insufficient system "
        r"storage", r"system (?:is )?(?:full|busy|unavailable|overloaded)",
        r"temporary (?:local |server )?(?:problem|failure|error)", r"server (?:is )?(?:busy|"
        r"unavailable|overloaded)", r"mailer(?:-daemon)? error", r"configuration error",
        r"out of memory", r"disk (?:is )?full", r"resources? (?:temporarily )?unavailable",
        r"service (?:is )?(?:currently )?(?:not )?(?:available|unavailable)",
        r"try again later", r"temporar", r"exit code", r"procmail", r"unable to process",
        r"command died with status", r"i/o error", r"error writing", r"mailbox (?:is )?locked",
        r"data format error", r"queue file write error")),
)

# Wording about the address that receivers' filters answer with too: KDDI/au (ezweb) reply
# "550 : User unknown", the address left out, to mail their user's filter refuses.
FILTER_WORDING = re.compile(r"\b5\d\d\s*:?\s+:\s*user unknown", re.I)

# Enhanced status (subject, detail) -> reason; a (subject, None) entry covers the rest of the
# subject. For a temporary (4.x.x) status the second name applies where it differs.
STATUS_CODES: dict[tuple[int, int | None], tuple[str, str]] = {
    (1, 1): ("no_such_user", "no_such_user"), (1, 2): ("no_such_domain", "network"),
    (1, 3): ("no_such_user", "no_such_user"), (1, 6): ("mailbox_moved", "mailbox_moved"),
    (1, 7): ("sender_refused", "sender_refused"), (1, 8): ("sender_refused", "sender_refused"),
    (1, 10): ("domain_accepts_no_mail", "domain_accepts_no_mail"),
    (1, None): ("unknown", "unknown"),
    (2, 1): ("mailbox_disabled", "mailbox_disabled"), (2, 2): ("mailbox_full", "mailbox_full"),
    (2, 3): ("message_too_large", "message_too_large"),
    (2, None): ("unknown", "unknown"),
    (3, 4): ("message_too_large", "message_too_large"),
    (3, None): ("system_error", "system_error"),
    (4, 4): ("no_such_domain", "network"), (4, 5): ("rate_limited", "rate_limited"),
    (4, 7): ("expired", "expired"), (4, None): ("network", "network"),
    (5, None): ("invalid_message", "invalid_message"),
    (6, None): ("invalid_message", "invalid_message"),
    (7, 7): ("invalid_message", "invalid_message"), (7, 13): ("mailbox_disabled", "mailbox_disabled"),
    (7, 20): ("authentication", "authentication"), (7, 21): ("authentication", "authentication"),
    (7, 22): ("authentication", "authentication"), (7, 23): ("authentication", "authentication"),
    (7, 24): ("authentication", "authentication"), (7, 25): ("ptr_required", "ptr_required"),
    (7, 26): ("authentication", "authentication"), (7, 27): ("sender_refused", "sender_refused"),
    (7, 28): ("ip_reputation", "ip_reputation"), (7, None): ("policy", "policy"),
    (0, None): ("unknown", "unknown"),
}


# What is not wording about the failure: addresses and links (a mailbox called
# "filtered@..." says nothing), header fields of a quoted original and a report's fields
# other than its Diagnostic-Code ("Final-Recipient: rfc822; ..." names no RFC broken).
_ADDRESSES = re.compile(r"<?[\w.+=-]+@[\w-]+(?:\.[\w-]+)+>?")
# A link says no more than its host name ("www.spamhaus.org/query/bl?ip=..." names a block
# list; its path and query are not wording).
_LINKS = re.compile(r"\b(?:https?://)?((?:www\.)?[\w-]+(?:\.[\w-]+)+)/\S*|\bhttps?://(\S+)", re.I)
_HEADER_LINES = re.compile(
    r"^[>|\s]*(?:X-[\w-]+|Received|DKIM-Signature|Content-[\w-]+|Message-ID|Subject|From|To|"
    r"Date|Return-Path|MIME-Version|Authentication-Results|References|In-Reply-To|"
    r"Reply-To|Sender|Cc|Reporting-MTA|Received-From-MTA|Arrival-Date|Final-Recipient|"
    r"Original-Recipient|Action|Status|Remote-MTA|Last-Attempt-Date|X-Postfix-[\w-]+):.*$",
    re.I | re.M)
# Lines that say nothing about the failure: a transcript's successful replies and the
# client's commands, the MIME preamble of a multipart body, report labels.
_NOT_WORDING = re.compile(
    r"^\s*(?:<<<\s*)?2\d\d[ -].*$|^\s*(?:>>>\s*)?(?:EHLO|HELO|MAIL FROM|RCPT TO|QUIT|RSET|"
    r"STARTTLS|AUTH)\b.*$|^.*\bis in MIME format\b.*$|^.*mail reader does not understand.*$|"
    r"technical details of (?:temporary|permanent) failure:?", re.I | re.M)
WINDOW = 3  # lines read together from the first that says something


def clean(text: str) -> str:
    text = _HEADER_LINES.sub("", text)
    text = _NOT_WORDING.sub("", text)
    text = _LINKS.sub(lambda m: f" {m.group(1) or ''} ", text)
    return _ADDRESSES.sub("the address", text)


def _first(text: str) -> str | None:
    for name, rule in TEXT_RULES:
        if rule.search(text):
            return name
    return None


def by_text(text: str) -> str | None:
    """The reason the wording of ``text`` names, or None. A bounce may list several
    recipients, each with its error: the first line that says something is read (with the
    lines continuing it), the rules in their order of precedence within it."""
    lines = [line.strip() for line in clean(text).splitlines() if line.strip()]
    for index, line in enumerate(lines):
        alone = _first(line)
        if alone is not None:
            # the line alone (the next may be another recipient's error)
            return alone
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if _first(following) is None and _first(f"{line} {following}") is not None:
            # wording that wraps ("Mail quota" / "exceeded."): the line with those
            # continuing it
            return _first(" ".join(lines[index:index + WINDOW]))
    return None


def by_status(status: str) -> str | None:
    """The reason an enhanced status code names ("5.1.1" -> no_such_user), or None."""
    klass, subject, detail = (int(x) for x in status.split("."))
    entry = STATUS_CODES.get((subject, detail)) or STATUS_CODES.get((subject, None))
    if entry is None:
        return None
    return entry[1] if klass == 4 else entry[0]
