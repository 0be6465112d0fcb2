"""PII detection and redaction (filters/pii.py): true positives and the traps that must not match."""
import pytest

from beam_pipeline.filters import pii


def found(text, kinds=pii.KINDS):
    return [(text[start:end], kind) for start, end, kind in pii.detect(text, kinds)]


@pytest.mark.parametrize("text,expected", [
    # emails
    ("write to jane.doe+news@mail.example.co.uk today", [("jane.doe+news@mail.example.co.uk", "email")]),
    ("Marc-André Lemburg <mal@lemburg.com>", [("mal@lemburg.com", "email")]),
    # phones: the FSF's address line from the GPL, NANP forms, international numbers
    ("Boston, MA 02110-1301 USA, phone (617) 542-5942", [("(617) 542-5942", "phone")]),
    ("call 415-555-2671 or 415.555.2671 or +1 415 555 2671", [("415-555-2671", "phone"), ("415.555.2671", "phone"),
                                                              ("+1 415 555 2671", "phone")]),
    ("London +44 20 7946 0958, Berlin +49 30 123456", [("+44 20 7946 0958", "phone"), ("+49 30 123456", "phone")]),
    # IP addresses
    ("connect to 192.168.0.1:8080 or 10.0.0.255", [("192.168.0.1", "ip"), ("10.0.0.255", "ip")]),
    ("listen on ::1 and fe80::1ff:fe23:4567:890a, or 2001:db8::ff00:42:8329",
     [("::1", "ip"), ("fe80::1ff:fe23:4567:890a", "ip"), ("2001:db8::ff00:42:8329", "ip")]),
    # payment cards (well-known test numbers, Luhn-valid)
    ("Visa 4111 1111 1111 1111, Amex 3782 822463 10005, MC 5555-5555-5555-4444",
     [("4111 1111 1111 1111", "credit_card"), ("3782 822463 10005", "credit_card"),
      ("5555-5555-5555-4444", "credit_card")]),
    # SSN (the famous Woolworth wallet number)
    ("SSN 078-05-1120 on the card", [("078-05-1120", "ssn")]),
    # IBANs (ISO 13616 examples)
    ("pay DE89 3704 0044 0532 0130 00 or GB82WEST12345698765432.", [("DE89 3704 0044 0532 0130 00", "iban"),
                                                                     ("GB82WEST12345698765432", "iban")]),
    # secrets (AWS's documented example key id; made-up tokens of the right shape)
    ("key AKIAIOSFODNN7EXAMPLE", [("AKIAIOSFODNN7EXAMPLE", "secret")]),
    ("token ghp_" + "A1b2C3d4E5" * 3 + "abcdef", [("ghp_" + "A1b2C3d4E5" * 3 + "abcdef", "secret")]),
    ("xoxb-123456789012-abcdefABCDEF", [("xoxb-123456789012-abcdefABCDEF", "secret")]),
    ("AIza" + "B" * 35, [("AIza" + "B" * 35, "secret")]),
])
def test_true_positives(text, expected):
    assert found(text) == expected


def test_private_key_block_is_one_secret():
    text = "config:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nabc+/=\n-----END RSA PRIVATE KEY-----\nend"
    ((span, kind),) = found(text)
    assert kind == "secret" and span.startswith("-----BEGIN") and span.endswith("KEY-----")
    assert found("-----BEGIN PGP SIGNATURE-----\nabc\n-----END PGP SIGNATURE-----") == []  # public material


@pytest.mark.parametrize("text", [
    "Released 2014-05-12 and 12/05/2014 and 12.05.2014",        # dates
    "Python 3.11.2, version 1.2.3, 10.0.19045.2965",            # version numbers
    "ISBN 978-0-13-110362-7 and ISBN-13 9780131103627",         # ISBNs (Luhn may pass by chance: no issuer)
    "order #555-234-5678, ORD-555-234-5678, id 5552345678",     # order ids, bare digit runs
    "order number 1234567812345678, invoice 4111111111111112",  # 16 digits without issuer / Luhn
    "OID 1.3.6.1.4.1.311 and 1.2.3.4.5",                       # dotted numbers longer than an IPv4
    "999.1.1.1 and 256.256.256.256",                            # octets above 255
    "std::map and Example:: and 12:30:45 and a::b",             # colons that are not IPv6
    "@decorator, user@localhost, pip install pkg@1.2",          # not emails
    "SSN-like 000-12-3456, 666-12-3456, 900-12-3456, 123-00-4567",  # never-issued SSNs
    "DE89 3704 0044 0532 0130 01 (bad check digits)",           # IBAN with a wrong checksum
    "ghp_short and AKIA123",                                    # too short for a token
])
def test_traps(text):
    assert found(text) == []


def test_counts_and_unchecked_kinds():
    text = "mail a@example.org, b@example.org; call (617) 542-5942"
    row = pii.counts(text, ["email", "phone"])
    assert row["email"] == 2 and row["phone"] == 1 and row["total"] == 3
    assert row["ip"] is None and row["secret"] is None   # not checked: absent, not zero
    from beam_pipeline.schemas import PII

    assert set(row) == {f.name for f in PII} - {"doc_id", "source"}


def test_redaction_tokens_and_overlaps():
    text = "Contact jane@example.com or (617) 542-5942 from 192.168.0.1."
    redacted, n = pii.redact(text)
    assert redacted == "Contact <EMAIL> or <PHONE> from <IP_ADDRESS>."
    assert n == 3
    custom, _ = pii.redact(text, kinds=["email"], tokens={"email": "[email removed]"})
    assert custom == "Contact [email removed] or (617) 542-5942 from 192.168.0.1."
    # an email inside a private-key block is part of the secret (priority: secret first)
    block = "-----BEGIN PRIVATE KEY-----\nroot@example.com\n-----END PRIVATE KEY-----"
    assert pii.redact(block)[0] == "<SECRET>"


def test_cheap_prefilters_skip_text_without_candidates():
    assert pii.number_windows("no digits at all here") == []
    assert pii.number_windows("call 415-555-2671 now") == [(2, 20)]
    assert list(pii.find_emails("no at sign")) == []


def test_luhn_and_iban_checks():
    assert pii.luhn_valid("4111111111111111") and not pii.luhn_valid("4111111111111112")
    assert pii.iban_valid("GB82 WEST 1234 5698 7654 32") and not pii.iban_valid("GB82 WEST 1234 5698 7654 33")
    assert not pii.iban_valid("XX82WEST12345698765432")
