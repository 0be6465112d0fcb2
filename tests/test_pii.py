"""PII detection and redaction (filters/pii.py, filters/pii_numbers.py): true positives and the traps that must
not match."""
import pytest

from beam_pipeline.filters import pii, pii_numbers
from beam_pipeline.filters.code_points import code_point_table


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
    from beam_pipeline.storage.schemas import PII

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
    assert pii_numbers.number_windows("no digits at all here") == []
    assert pii_numbers.number_windows("call 415-555-2671 now") == [(2, 20)]
    assert list(pii.find_emails("no at sign")) == []


def test_luhn_and_iban_checks():
    assert pii_numbers.luhn_valid("4111111111111111") and not pii_numbers.luhn_valid("4111111111111112")
    assert pii.iban_valid("GB82 WEST 1234 5698 7654 32") and not pii.iban_valid("GB82 WEST 1234 5698 7654 33")
    assert not pii.iban_valid("XX82WEST12345698765432")


# --- fast paths: each is compared with its plain twin (the regex over the whole text) ----------------------

def _crafted_cases():
    """Deterministic edge cases for the fast paths: PII pieces glued to separators, Unicode letters and digits,
    text boundaries, long local parts and domains, runs of '@' and ':'."""
    import random

    pieces = [
        "a@b.cc", "a@b.c", "a@b.c@d.ee", "a@@b.cc", "x.y-z+w@q.rs", "user@localhost", "pkg@1.2", "@decorator",
        "a" * 63 + "@ex.com", "a" * 64 + "@ex.com", "a" * 65 + "@ex.com", "a@" + "d" * 61 + ".com",
        "a@" + "d" * 62 + ".com", "a@" + "lab." * 40 + "org", "a@b." + "c" * 24, "a@b." + "c" * 25, "a@ex.com_",
        "a@ex.com-", "a@ex.com\u00e9", "\u00e9a@ex.com", "a@ex.c0m", "@@@",
        "DE89370400440532013000", "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "GB82WEST1234569876543",
        "NO9386011117947", "XX82WEST12345698765432", "GB\u0663\u0662WEST12345698765432", "AB12", "ABC123",
        "::1", "fe80::1ff:fe23:4567:890a", "2001:db8::ff00:42:8329", "::ffff:192.168.0.1", "::abc:1", "abc::1",
        "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:255.255.255.255", "1234:5678:9abc:def0:1234:5678:9abc:def0:",
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255", ":ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
        "XX12 ABCD AB12 CDEF GHIJ KLMN", "DE89 3704 0044 0532 0130 00 GB82 WEST 1234 5698 7654 32",
        "\u0663::", ":\u0663:", "std::map", "12:30:45", ".. note::", "1abcd:a:",
        "AKIAIOSFODNN7EXAMPLE", "ASIA" + "B" * 16, "AIPA" + "C" * 16, "ANVA" + "D" * 15, "ghp_" + "x" * 36,
        "ghu_" + "y" * 36, "github_pat_" + "a" * 22, "xoxb-" + "1" * 10, "AIza" + "B" * 35, "sk_live_" + "k" * 24,
        "eyJ" + "a" * 10 + ".eyJ" + "b" * 10 + "." + "c" * 10, "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----",
        "1234567", "123456", "1     1", "1    1", "1 2 3 4 5 6 7", "(617) 542-5942", "+1 415 555 2671", "078-05-1120",
        "4111 1111 1111 1111", "\u0661\u0662\u0663\u0664\u0665\u0666\u0667", "\uff11\uff12\uff13\uff14\uff15\uff16\uff17",
        "12\u00b2345678", "1-------1", ".-1 2(3)4+5-6.7-", "192.168.0.1",
    ]
    atoms = [".", "+", "-", "_", "@", " ", "\n", ":", "::", "\u00e9", "\u4e2d", "a", "Z", "0", "9", "#", "\u0663",
             "\ud800", "DE", "12"]
    cases = list(pieces)
    for piece in pieces:
        for atom in atoms:
            cases += [atom + piece, piece + atom]
    rng = random.Random(26)
    for _ in range(1500):
        cases.append("".join(rng.choice(pieces + atoms * 3) for _ in range(rng.randint(1, 8))))
    for alphabet in ("a@.-_+", "aZ9@.-\u00e9", "0123456789:abcdef.", "DEGB0123456789 ", "1:a.g \u0663", "0123456789 .()+-a",
                     "19 -\u0663\uff11\u00b2\n"):
        for _ in range(300):
            cases.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))))
    return cases


CRAFTED = _crafted_cases()


def test_email_windows_match_the_whole_text():
    for text in CRAFTED:
        windowed = [m.span() for m in pii_numbers.in_windows(pii._EMAIL, text, pii.email_windows(text))]
        assert windowed == [m.span() for m in pii._EMAIL.finditer(text)], text


def test_number_runs_match_the_whole_text():
    assert code_point_table(r"\d").tolist() == [chr(c).isdecimal() for c in range(0x110000)]
    for text in CRAFTED:
        whole = [m.span() for m in pii_numbers._NUMBERISH.finditer(text)]
        assert [m.span() for m in pii_numbers._numberish_matches(text)] == whole, text


def test_ipv6_windows_and_hint_match_the_whole_text():
    for text in CRAFTED:
        no_hint = pii_numbers._IPV6_HINT.search(text) is None
        assert (pii_numbers._IPV6_HINT_AT_COLON.search(text) is None) == no_hint, text
        windows = pii_numbers.ipv6_windows(text)
        windowed = [m.span() for m in pii_numbers.in_windows(pii_numbers._IPV6_CANDIDATE, text, windows)]
        assert windowed == [m.span() for m in pii_numbers._IPV6_CANDIDATE.finditer(text)], text


def test_iban_starts_match_the_whole_text():
    def every_position(text):
        found, resume = [], 0
        for start in range(len(text)):
            span = pii.iban_at(text, start) if start >= resume else None
            if span is not None:
                found.append(span)
                resume = span[1]
        return found

    for text in CRAFTED:
        starts = set(pii.iban_starts(text))
        assert all(start in starts for m in pii._IBAN.finditer(text) for start in [m.start()]), text
        assert list(pii.find_ibans(text)) == every_position(text), text


def test_secret_prefilters_match_the_substring_checks():
    aws = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")
    plain = [lambda t: any(p in t for p in aws), lambda t: any(f"gh{c}_" in t for c in "pousr")]
    plain += [lambda t, p=p: p in t for p in ("github_pat_", "xox", "AIza", "_live_", "eyJ", "PRIVATE KEY")]
    assert len(plain) == len(pii._SECRETS)
    for text in CRAFTED + [p for p in aws] + [f"gh{c}_" for c in "pousr"]:
        assert [pii._occurs(prefilter, text) for prefilter, _ in pii._SECRETS] == [check(text) for check in plain]
        whole = [m.span() for _, pattern in pii._SECRETS for m in pattern.finditer(text)]
        assert list(pii.find_secrets(text)) == whole, text


def test_detectors_find_what_the_crafted_cases_hold():
    """The crafted cases exercise every fast path (not only texts where nothing matches)."""
    kinds = {kind for text in CRAFTED for _, _, kind in pii.detect(text)}
    assert {"email", "ip", "iban", "secret"} <= kinds
