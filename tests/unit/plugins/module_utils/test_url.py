"""module_utils/_url.py (issue 46 item 1/3): the one URL syntax of the role inputs and the apt sources; the raw text is
checked before it is parsed (urlsplit drops newlines), and a reason never repeats the value."""
from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._url import (
    URLError, apt_auth_lines, rebuild, split_credentials, url_problem)

GOOD = ["http://deb.debian.org/debian", "https://nvidia.github.io/libnvidia-container", "http://mirror:8080/",
        "http://10.0.0.1/debian", "http://[fd00::1]:3142/debian", "https://m.example/a%20b/~x", "file:///srv/mirror",
        "HTTPS://Mirror.Example/x", "http://mirror.example.", "file://localhost/srv/m"]
BAD = [
    "http://deb.example/debian\nTrusted: yes", "http://deb.example/debian\rTrusted: yes",
    "http://deb.example/debian Trusted", "http://deb.example/\tx", " http://deb.example/", "http://deb.example/\x00",
    "http://deb.example/\x7f", "ftp://deb.example/", "deb.example/debian", "http:///debian", "http://:80/",
    "http://deb.example:0/", "http://deb.example:65536/", "http://deb.example:port/", "http://deb_.example/x y",
    "http://[fd00::zz]/", "http://[fd00::1]x/", "http://u:pw@deb.example/", "http://deb.example/?q=1",
    "http://deb.example/#f", 'http://deb.example/"', "http://deb.example/{x}", "file://host/srv", "file:///srv/../etc",
    "file://relative", "", 5, None, "http://deb.example/%zz",
]


@pytest.mark.parametrize("value", GOOD)
def test_good_urls(value):
    assert url_problem(value) is None


@pytest.mark.parametrize("value", BAD)
def test_bad_urls_are_refused_without_repeating_the_value(value):
    problem = url_problem(value)
    assert problem
    if isinstance(value, str) and value:
        assert value not in problem and "pw" not in problem and "Trusted" not in problem


def test_the_newline_is_caught_although_urlsplit_drops_it():
    value = "http://deb.example/debian\nTrusted: yes"
    assert "\n" not in urlsplit(value).geturl()  # the defect: a check on the parsed parts sees no newline
    assert "newline" in url_problem(value)


def test_schemes_and_userinfo():
    assert url_problem("file:///srv/m", schemes=("http", "https")) == "the scheme must be http, https"
    assert url_problem("http://u:p@m.example/", userinfo=True) is None
    assert "user information" in url_problem("http://u:p@m.example/")
    assert "port" in url_problem("http://m.example:99999/")


def test_rebuild_from_the_parts():
    assert rebuild("HTTP://Mirror.Example:8080/debian/") == "http://Mirror.Example:8080/debian/"
    assert rebuild("file://localhost/srv/m") == "file:///srv/m"
    assert rebuild("http://[fd00::1]:3142/d") == "http://[fd00::1]:3142/d"
    with pytest.raises(URLError):
        rebuild("http://deb.example/debian\nTrusted: yes")


def test_split_credentials():
    assert split_credentials("https://build%40site:s3cr%3At@mirror.example:8443/debian") == (
        "https://mirror.example:8443/debian", "mirror.example", "build@site", "s3cr:t")
    assert split_credentials("https://tok@mirror.example/d") == ("https://mirror.example/d", "mirror.example", "tok", None)
    assert split_credentials("http://mirror.example/d") == ("http://mirror.example/d", "mirror.example", None, None)
    with pytest.raises(URLError) as err:
        split_credentials("https://u:pw@mirror.example/d\nTrusted: yes")
    assert "pw" not in str(err.value)


# A repository's login (issue 46 item 3): to apt's auth.conf.d as the proxy's, over https only, never in the source.
def test_apt_auth_lines_of_an_https_login():
    assert apt_auth_lines("https://build%40site:s3cr%3At@mirror.example:8443/debian") == [
        "machine https://mirror.example:8443/debian", "login build@site", "password s3cr:t"]
    assert apt_auth_lines("https://tok@mirror.example/d") == ["machine https://mirror.example/d", "login tok", "password "]
    assert apt_auth_lines("https://mirror.example/d") == [] == apt_auth_lines("file:///srv/m")


@pytest.mark.parametrize("value,why", [("http://u:pw@mirror.example/d", "only over https://"),
                                       ("https://:pw@mirror.example/d", "user name before '@' is empty"),
                                       ("https://u:p%20w@mirror.example/d", "whitespace or a control character"),
                                       ("https://u%0A:pw@mirror.example/d", "whitespace or a control character"),
                                       ("https://u:pw@mirror.example/d\nTrusted: yes", "newline")])
def test_apt_auth_lines_refused_without_the_password(value, why):
    with pytest.raises(URLError) as err:
        apt_auth_lines(value)
    assert why in str(err.value) and "pw" not in str(err.value) and "p%20w" not in str(err.value)


def test_the_source_uri_drops_an_https_login_and_refuses_an_http_one():
    assert rebuild("https://u:pw@mirror.example/d", userinfo="https") == "https://mirror.example/d"
    assert "only over https://" in url_problem("http://u:pw@mirror.example/d", userinfo="https")
