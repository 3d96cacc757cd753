"""Telling likely machine opens and clicks from people's: image proxies, privacy prefetching,
link scanners. Heuristics only, so events are always recorded; the verdict is stored beside
them (``likely_machine`` and ``detection``, the reason) for the stats and the event lists.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from datetime import datetime

# Apple Mail Privacy Protection fetches every image of a message through Apple's proxies
# (17.0.0.0/8), whether or not anyone reads it, with a bare generic user agent.
_APPLE_NETWORK = ipaddress.ip_network("17.0.0.0/8")
_BARE_MOZILLA = re.compile(r"^Mozilla/5\.0\s*$")

# Proxies that fetch images when the recipient opens the message: a real open, but the IP and
# user agent are the proxy's. Recorded as such, not counted as machines.
_OPEN_PROXIES = (
    ("googleimageproxy", "google_proxy"),
    ("ggpht.com", "google_proxy"),
    ("yahoomailproxy", "yahoo_proxy"),
)

# Security gateways, link scanners, crawlers and HTTP libraries (case-insensitive substrings).
_SCANNERS = (
    "barracuda", "mimecast", "proofpoint", "urldefense", "messagelabs", "symantec", "trendmicro",
    "forcepoint", "fortiguard", "sophos", "zscaler", "safelinks", "bitdefender", "checkpoint",
    "microsoft office protocol discovery", "ms-office", "skypeuripreview", "slackbot",
    "whatsapp", "facebookexternalhit", "twitterbot", "linkedinbot", "discordbot", "telegrambot",
    "headlesschrome", "phantomjs", "python-requests", "python-urllib", "aiohttp", "httpx",
    "go-http-client", "curl/", "wget/", "java/", "okhttp", "libwww-perl", "apache-httpclient",
    "bot", "crawler", "spider", "scanner", "preview",
)


@dataclass(frozen=True)
class Verdict:
    likely_machine: bool
    detection: str | None  # the reason, or the proxy that fetched a real open


HUMAN = Verdict(False, None)


def _in_apple_network(ip: str | None) -> bool:
    try:
        return ip is not None and ipaddress.ip_address(ip) in _APPLE_NETWORK
    except ValueError:
        return False


def classify(*, kind: str, user_agent: str | None, ip: str | None, method: str = "GET",
             sent_at: datetime | None, at: datetime, machine_seconds: float) -> Verdict:
    """``kind`` is "open" or "click". Checks run from the most to the least specific."""
    ua = (user_agent or "").strip()
    low = ua.lower()
    if method.upper() == "HEAD":
        return Verdict(True, "head_request")  # browsers follow links with GET; scanners probe
    if not ua:
        return Verdict(True, "no_user_agent")
    if kind == "open" and (_in_apple_network(ip) or _BARE_MOZILLA.match(ua)):
        return Verdict(True, "apple_mpp")
    for needle, name in _OPEN_PROXIES:
        if needle in low:
            return Verdict(False, name) if kind == "open" else Verdict(True, name)
    for needle in _SCANNERS:
        if needle in low:
            return Verdict(True, "scanner")
    if sent_at is not None and 0 <= (at - sent_at).total_seconds() < machine_seconds:
        return Verdict(True, "too_soon")
    return HUMAN
