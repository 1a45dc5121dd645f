"""Which URLs the http handler accepts at create time: scheme, host allow-list, addresses."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

import pytest

from jobsvc.handlers.errors import HandlerConfigError, InvalidHandlerParams
from jobsvc.handlers.http import HttpHandler

SECRET = "whsec_" + "c2VjcmV0" * 4  # 24 bytes
PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:4700:4700::1111"

DNS = {
    "hooks.example.com": [PUBLIC_V4],
    "deep.hooks.example.com": [PUBLIC_V4],
    "v6.example.com": [PUBLIC_V6],
    "example.com": [PUBLIC_V4],
    "internal.example.com": ["10.1.2.3"],
    "metadata.example.com": ["169.254.169.254"],
    "mixed.example.com": [PUBLIC_V4, "127.0.0.1"],
    "mixed6.example.com": [PUBLIC_V6, "::1"],
    "mapped.example.com": ["::ffff:127.0.0.1"],
}


def fake_resolver(host: str, port: int) -> list[str]:
    try:
        return DNS[host]
    except KeyError:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None


def make_handler(allowed_hosts, **kwargs) -> HttpHandler:
    kwargs.setdefault("resolver", fake_resolver)
    return HttpHandler(
        signing_secrets=lambda user_id: [SECRET], allowed_hosts=allowed_hosts, **kwargs
    )


def refusal(handler: HttpHandler, params) -> str:
    with pytest.raises(InvalidHandlerParams) as caught:
        handler.validate_params(params)
    assert caught.value.field == "handler_params"
    return str(caught.value)


@pytest.fixture
def handler() -> HttpHandler:
    return make_handler(["hooks.example.com", "*.example.com"])


def test_an_allowed_public_url_is_accepted_and_stored_as_given(handler):
    url = "https://hooks.example.com/jobs?token=abc"

    assert handler.validate_params({"url": url}) == {"url": url}


def test_host_names_are_compared_case_insensitively_and_without_a_trailing_dot(handler):
    assert handler.validate_params({"url": "HTTPS://Hooks.EXAMPLE.com./x"})


def test_an_ipv6_host_with_a_public_address_is_accepted(handler):
    assert handler.validate_params({"url": "http://v6.example.com/"})


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example.com/",
        "file:///etc/passwd",
        "gopher://hooks.example.com/",
        "javascript:alert(1)",
        "hooks.example.com/jobs",
        "//hooks.example.com/jobs",
    ],
)
def test_a_url_that_is_not_http_or_https_is_refused(handler, url):
    assert "http:// or https://" in refusal(handler, {"url": url})


@pytest.mark.parametrize(
    "url",
    ["https://user:pw@hooks.example.com/", "https://hooks.example.com@evil.test/"],
)
def test_a_url_with_credentials_is_refused(handler, url):
    assert "credentials" in refusal(handler, {"url": url})


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/a b",
        "https://hooks.example.com/\nX-Injected: 1",
        "https://hooks.example.com/\t",
        "https://hööks.example.com/",
    ],
)
def test_a_url_with_spaces_control_or_non_ascii_characters_is_refused(handler, url):
    assert "printable ASCII" in refusal(handler, {"url": url})


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://hooks.example.com:99999/", "malformed"),
        ("http://[::1/", "malformed"),
        ("https://hooks.example.com:0/", "port 0"),
        ("https:///path", "no host"),
        ("https://-bad-.example.com/", "not a valid host name"),
    ],
)
def test_a_malformed_url_is_refused_with_the_reason(handler, url, words):
    assert words in refusal(handler, {"url": url})


def test_an_overlong_url_is_refused(handler):
    url = "https://hooks.example.com/" + "a" * 2048

    assert "longer than 2048" in refusal(handler, {"url": url})


@pytest.mark.parametrize("params", [{}, {"url": ""}, {"url": 42}, {"url": None}])
def test_the_url_is_required_and_must_be_a_string(handler, params):
    assert "url is required" in refusal(handler, params)


def test_parameters_other_than_url_method_and_headers_are_refused_by_name(handler):
    message = refusal(handler, {"url": "https://hooks.example.com/", "verb": "PUT"})

    assert "verb" in message


@pytest.mark.parametrize("params", [None, [], "https://hooks.example.com/"])
def test_parameters_must_be_an_object(handler, params):
    assert "JSON object" in refusal(handler, params)


# --- The allow-list ----------------------------------------------------------------------


def test_a_host_not_in_the_allow_list_is_refused():
    handler = make_handler(["hooks.example.com"])

    assert "allow-list" in refusal(handler, {"url": "https://example.com/"})


def test_a_suffix_pattern_allows_subdomains_at_any_depth_but_not_the_domain_itself():
    handler = make_handler(["*.hooks.example.com"])

    assert handler.validate_params({"url": "https://deep.hooks.example.com/"})
    assert "allow-list" in refusal(handler, {"url": "https://hooks.example.com/"})


@pytest.mark.parametrize(
    "host",
    ["evilexample.com", "example.com.evil.test", "example.com", "hooks.example.co"],
)
def test_a_suffix_pattern_does_not_match_look_alike_hosts(host):
    handler = make_handler(["*.example.com"])

    assert "allow-list" in refusal(handler, {"url": f"https://{host}/"})


def test_an_empty_allow_list_refuses_every_url():
    handler = make_handler([])

    assert "allow-list" in refusal(handler, {"url": "https://hooks.example.com/"})


def test_a_suffix_pattern_never_matches_an_ip_address():
    handler = make_handler(["*.215.14"], allow_private_addresses=True)

    assert "allow-list" in refusal(handler, {"url": f"http://{PUBLIC_V4}/"})


def test_ip_addresses_in_the_allow_list_match_whatever_their_spelling():
    handler = make_handler(["[2606:4700:4700:0::1111]", PUBLIC_V4])

    assert handler.validate_params({"url": "http://[2606:4700:4700::1111]/"})
    assert handler.validate_params({"url": f"http://{PUBLIC_V4}/"})


@pytest.mark.parametrize(
    "allowed_hosts",
    [
        "hooks.example.com",
        ["*example.com"],
        ["hooks.*.com"],
        ["*"],
        ["https://x.com"],
        [""],
        ["hooks.example.com:"],
        ["hooks.example.com:0"],
        ["hooks.example.com:http"],
        ["[2606:4700:4700::1111]8080"],
    ],
)
def test_a_malformed_allow_list_stops_the_handler_at_construction(allowed_hosts):
    with pytest.raises(HandlerConfigError):
        make_handler(allowed_hosts)


# --- Addresses ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1/", "loopback"),
        ("http://127.1.2.3:8080/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[fd00::1]/", "private"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://[::]/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[ff02::1]/", "multicast"),
        ("http://240.0.0.1/", "reserved"),
        ("http://100.64.0.1/", "non-global"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private"),
    ],
)
def test_an_ip_address_that_is_not_public_is_refused_even_when_allow_listed(url, kind):
    host = urlsplit(url).hostname
    handler = make_handler([f"[{host}]:*" if ":" in host else f"{host}:*"])

    message = refusal(handler, {"url": url})
    assert f"a {kind} address" in message


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("internal.example.com", "private"),
        ("metadata.example.com", "link-local"),
        ("mapped.example.com", "loopback"),
    ],
)
def test_a_host_name_resolving_to_a_non_public_address_is_refused(host, kind):
    handler = make_handler(["*.example.com"])

    assert f"a {kind} address" in refusal(handler, {"url": f"https://{host}/"})


@pytest.mark.parametrize("host", ["mixed.example.com", "mixed6.example.com"])
def test_every_resolved_address_is_checked_not_only_the_first(host):
    handler = make_handler(["*.example.com"])

    assert "loopback" in refusal(handler, {"url": f"https://{host}/"})


def test_localhost_is_refused_through_the_real_resolver():
    handler = HttpHandler(
        signing_secrets=lambda user_id: [SECRET], allowed_hosts=["localhost:8000"]
    )

    message = refusal(handler, {"url": "http://localhost:8000/"})
    assert "a loopback address" in message
    assert "127.0.0.1" not in message  # what an internal name resolves to is not said


def test_a_host_that_does_not_resolve_is_refused_at_create_time():
    handler = make_handler(["*.example.com"])

    assert "could not be resolved" in refusal(handler, {"url": "https://nxdomain.example.com/"})


def test_private_addresses_may_be_allowed_and_then_nothing_is_resolved_at_create_time():
    def no_dns(host: str, port: int) -> list[str]:
        raise AssertionError("resolved")

    handler = make_handler(
        ["127.0.0.1:8000", "localhost", "internal.example.com"],
        allow_private_addresses=True,
        resolver=no_dns,
    )

    assert handler.validate_params({"url": "http://127.0.0.1:8000/"})
    assert handler.validate_params({"url": "http://localhost/"})
    assert handler.validate_params({"url": "https://internal.example.com/"})


# --- Ports ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.example.com/", True),
        ("http://hooks.example.com/", True),
        ("https://hooks.example.com:443/", True),
        ("https://hooks.example.com:8443/", False),
        ("http://hooks.example.com:25/", False),
        ("http://hooks.example.com:6379/", False),
    ],
)
def test_a_host_without_a_port_allows_the_web_ports_only(url, allowed):
    handler = make_handler(["hooks.example.com", "*.example.com"])

    if allowed:
        assert handler.validate_params({"url": url})
    else:
        assert "on port" in refusal(handler, {"url": url})


def test_an_entry_with_a_port_allows_that_port_and_a_star_any():
    handler = make_handler(
        ["hooks.example.com:8443", "*.hooks.example.com:*", f"[{PUBLIC_V6}]:9000"]
    )

    assert handler.validate_params({"url": "https://hooks.example.com:8443/"})
    assert "on port 443" in refusal(handler, {"url": "https://hooks.example.com/"})
    assert handler.validate_params({"url": "http://deep.hooks.example.com:6379/"})
    assert handler.validate_params({"url": f"http://[{PUBLIC_V6}]:9000/"})
    assert "on port 80" in refusal(handler, {"url": f"http://[{PUBLIC_V6}]/"})
