"""tensorcom.urls: the URL grammar table, brace expansion, and errors that name the URL."""

import pytest

from tensorcom import urls
from tensorcom.errors import URLError

GOOD = [
    # url, socket type, bind, transport, address, topic
    ("zpush://127.0.0.1:7880", "PUSH", False, "tcp", "127.0.0.1:7880", ""),
    ("zpull://127.0.0.1:7880", "PULL", True, "tcp", "127.0.0.1:7880", ""),
    ("zrpush://*:7880", "PUSH", True, "tcp", "*:7880", ""),
    ("zrpull://localhost:1", "PULL", False, "tcp", "localhost:1", ""),
    ("zpub://127.0.0.1:65535", "PUB", True, "tcp", "127.0.0.1:65535", ""),
    ("zsub://127.0.0.1:7880", "SUB", False, "tcp", "127.0.0.1:7880", ""),
    ("zsub://127.0.0.1:7880#train", "SUB", False, "tcp", "127.0.0.1:7880", "train"),
    ("zrpub://127.0.0.1:7880/", "PUB", False, "tcp", "127.0.0.1:7880", ""),
    ("zrsub://127.0.0.1:*", "SUB", True, "tcp", "127.0.0.1:*", ""),
    ("zpush+ipc:///tmp/feed", "PUSH", False, "ipc", "/tmp/feed", ""),
    ("zpull+ipc://relative/feed", "PULL", True, "ipc", "relative/feed", ""),
    ("zpub+inproc://feed#a.b", "PUB", True, "inproc", "feed", "a.b"),
    ("zpush+tcp://[::1]:80", "PUSH", False, "tcp", "[::1]:80", ""),
    ("ZPUSH+TCP://host:80", "PUSH", False, "tcp", "host:80", ""),
    ("zshare://127.0.0.1:7000", None, True, "tcp", "127.0.0.1:7000", ""),
    ("zsplit+ipc:///tmp/s", None, True, "ipc", "/tmp/s", ""),
    ("zjoin://127.0.0.1:7000", None, False, "tcp", "127.0.0.1:7000", ""),
]

BAD = [
    ("127.0.0.1:7880", "no SCHEME"),
    ("http://127.0.0.1:7880", "unknown scheme"),
    ("zpush+udp://127.0.0.1:7880", "unknown transport"),
    ("zpush://127.0.0.1", "HOST:PORT"),
    ("zpush://:7880", "HOST:PORT"),
    ("zpush://127.0.0.1:port", "HOST:PORT"),
    ("zpush://127.0.0.1:0", "outside"),
    ("zpush://127.0.0.1:70000", "outside"),
    ("zpush://127.0.0.1:*", "binding side"),
    ("zpush+ipc://", "missing path"),
    ("zpush+inproc://", "missing name"),
    ("zpush://127.0.0.1:7880#topic", "publish/subscribe"),
    ("zsub://127.0.0.1:7880#", "topic"),
    ("zsub://127.0.0.1:7880#a b", "topic"),
    ("zpull+ipc:///" + "x" * 200, "longer"),
    ("zpush://127.0.0.1:7880/extra", "HOST:PORT"),
]


@pytest.mark.parametrize("url,socket_type,bind,transport,address,topic", GOOD)
def test_good_urls(url, socket_type, bind, transport, address, topic):
    endpoint = urls.parse(url)
    assert (endpoint.socket_type, endpoint.bind, endpoint.transport) == (socket_type, bind, transport)
    assert (endpoint.address, endpoint.topic) == (address, topic)
    assert endpoint.zmq_address == f"{transport}://{address}"
    assert endpoint.url == url


@pytest.mark.parametrize("url,why", BAD)
def test_bad_urls_name_the_url_and_the_schemes(url, why):
    with pytest.raises(URLError) as info:
        urls.parse(url)
    text = str(info.value)
    assert repr(url) in text and why in text
    assert "zpush" in text and "zjoin" in text  # the valid schemes are listed
    assert isinstance(info.value, ValueError)


def test_roles():
    assert urls.parse("zpush://h:1").sends and not urls.parse("zsub://h:1").sends
    assert urls.parse("zjoin://h:1").sharing and not urls.parse("zpull://h:1").sharing


def test_brace_expansion():
    endpoints = urls.parse_all("zsub://127.0.0.1:788{0..3}")
    assert [e.address for e in endpoints] == [f"127.0.0.1:788{i}" for i in range(4)]
    assert urls.expand(["zpull://a:{1,2}", "zpull://b:3"]) == ["zpull://a:1", "zpull://a:2", "zpull://b:3"]


def test_noexpand_keeps_braces_and_fails_parse():
    assert urls.expand("zpull://a:{1,2}", noexpand=True) == ["zpull://a:{1,2}"]
    with pytest.raises(URLError):
        urls.parse_all("zpull://a:{1,2}", noexpand=True)


def test_type_errors_and_empty_lists():
    with pytest.raises(TypeError, match="42"):
        urls.parse(42)
    with pytest.raises(TypeError):
        urls.expand([b"zpull://a:1"])
    with pytest.raises(URLError):
        urls.expand([])
