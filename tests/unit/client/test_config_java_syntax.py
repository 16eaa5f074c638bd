"""Client property files and JAAS lines read as Java and Kafka read them (issue 36, item 10):
lines end at CR, LF and CRLF only; a JAAS line is read as Kafka's JaasConfig reads it (flags in
any case, single and double quotes, Java's escapes); no error message shows a secret."""

from __future__ import annotations

import pytest

from client.config import admin_config
from client.errors import ConfigError
from protocol.jaas import parse_jaas
from protocol.properties import parse_properties

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e",
                                       "\x0b", "\x0c"])
def test_only_cr_and_lf_end_a_line(separator):
    text = f"sasl.password=x{separator}ssl.endpoint.identification.algorithm=\nother=1\n"
    props = parse_properties(text)
    assert props["sasl.password"].startswith("x" + separator)
    assert "ssl.endpoint.identification.algorithm" not in props
    assert props["other"] == "1"


def test_cr_crlf_and_continuations():
    props = parse_properties("a=1\rb=2\r\nc=3\\\r\n    4\nd=\\u0041\\\\")
    assert props == {"a": "1", "b": "2", "c": "34", "d": "A\\"}


@pytest.mark.parametrize("line, user, password", [
    (f'{PLAIN} REQUIRED username="alice" password="s";', "alice", "s"),
    (f"{PLAIN} required username='al ice' password='a\"b';", "al ice", 'a"b'),
    (f'{PLAIN} required username="a" password="back\\\\slash\\"q";', "a", 'back\\slash"q'),
    (f'{PLAIN} required username=alice password=p@ss.w0rd-$;', "alice", "p@ss.w0rd-$"),
    (f'{PLAIN} required /* a comment */ username="a" // the rest of the line\n password="p";',
     "a", "p"),
    (f'{PLAIN} required username="a" password="\\101\\tb";', "a", "A\tb"),  # octal, tab
])
def test_jaas_lines_as_kafka_reads_them(line, user, password):
    conf = admin_config({"bootstrap.servers": "h:1", "sasl.jaas.config": line})
    assert (conf["sasl.username"], conf["sasl.password"]) == (user, password)


SECRET = "Sup3rS3cretPassw0rd"


@pytest.mark.parametrize("line", [
    f'{PLAIN} REQUIRD username="a" password="{SECRET}";',  # a misspelt flag
    f'{PLAIN} required username="a" password="{SECRET}"',  # no semicolon (Kafka refuses it)
    f'{PLAIN} required username="a" password={SECRET} x{SECRET};',  # a bare blank in a value
    f'{PLAIN} required username="a" password= {SECRET}=x;',
    f"{SECRET}",  # the password where the module should be
    f"{SECRET} required;",
    f'{PLAIN} required username="a" password="{SECRET}"; {PLAIN} required;',  # two modules
])
def test_no_error_message_shows_a_secret(line):
    with pytest.raises(ConfigError) as raised:
        admin_config({"bootstrap.servers": "h:1", "sasl.jaas.config": line,
                      "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"})
    message = str(raised.value)
    assert "sasl.jaas.config" in message
    for part in (SECRET, SECRET[:5], SECRET[-5:]):
        assert part not in message, message


def test_a_property_file_jaas_line_with_a_line_separator_in_the_password():
    props = parse_properties(f'sasl.jaas.config={PLAIN} required username="a" '
                             'password="x\u2028ssl.endpoint.identification.algorithm=";\n')
    assert list(props) == ["sasl.jaas.config"]
    (entry,) = parse_jaas(props["sasl.jaas.config"])
    assert entry.options["password"] == "x\u2028ssl.endpoint.identification.algorithm="
