"""Labeled PII bench: planted PII in real text of nine locales, hard negatives, precision and recall per kind
and per locale, micro F1, and the detector's throughput per core.

    .venv/bin/python bench/bench_pii.py                 # seed 41, 150 documents per locale
    .venv/bin/python bench/bench_pii.py --seed 7 --docs 300

Real text: the paragraphs of the Debian handbook (``debian-handbook`` 11.20220922, pinned in
``bench/build_corpus.py``; en-US, de-DE, fr-FR, it-IT, es-ES, nl-NL, pt-BR, ja-JP) and, for en-GB, the
sample's English Wikipedia articles. Paragraphs holding an '@', a dotted quad or an IPv6-like ``a:b:c`` are
left out (real addresses would count as false positives); everything else in them is an unlabelled
negative: versions, command lines, tables, dates as they occur.

Each document is a few consecutive paragraphs of one page with sentences from the locale's templates
inserted between them (deterministic: ``random.Random(f"{seed}:{locale}:{i}")``):

* planted PII (the gold spans): phone numbers in the locale's national and international formats, built
  from libphonenumber's example numbers with random subscriber digits and checked valid (national format,
  international, ``+49 (0)...``, ``0044 ...``, slashes, dots, hyphens, ``Tel:`` without a space, US
  extensions, CJK neighbours in Japanese); emails (CJK neighbours in Japanese); payment cards of five
  issuers with a Luhn check digit (Visa, Mastercard, Amex 4-6-5, Diners 4-6-4, Discover); IBANs of the
  locale's country with ISO 13616 check digits, sometimes two in a row; US SSNs with dashes and after an
  ``SSN`` label without them;
* hard negatives (nothing to find): versions, OIDs, ISBN-10/13 with valid check digits, dates in the
  locale's formats, timestamps, order / invoice numbers (some shaped like valid phone numbers), numeric
  table rows, thousands-grouped amounts, hashes, Luhn-failing 16-digit ids.

A detection is a true positive when it overlaps a gold span of its kind (each gold span matched once);
every other detection is a false positive; every unmatched gold span a false negative. The detector is
``pii.detect`` with every kind, as ``pii.counts`` (what the stage calls) runs it. Throughput: CPU seconds of
``pii.counts`` on one core over the bench documents and over the unplanted real text, best of 3 rounds
(interleaved with the ``--before`` detector's, as the machine may be shared).
``--before REV`` runs the same on the PII detector of a git revision (default HEAD): its whole ``beam_pipeline/filters/``.
Results: ``bench/results/pii-<date>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

LOCALES = {  # locale -> (handbook folder or None for the sample's Wikipedia, phone region, IBAN countries)
    "en-US": ("en-US", "US", ("DE", "GB")),
    "en-GB": (None, "GB", ("GB", "IE")),
    "de": ("de-DE", "DE", ("DE", "AT", "CH")),
    "fr": ("fr-FR", "FR", ("FR", "BE")),
    "it": ("it-IT", "IT", ("IT",)),
    "es": ("es-ES", "ES", ("ES",)),
    "nl": ("nl-NL", "NL", ("NL", "BE")),
    "pt-BR": ("pt-BR", "BR", ("BR", "PT")),
    "ja": ("ja-JP", "JP", ("GB", "DE")),
}
KINDS = ("email", "phone", "credit_card", "iban", "ssn")

# --- real text --------------------------------------------------------------------------------------------

_SKIP = re.compile(r"@|\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b|[0-9A-Fa-f]*:[0-9A-Fa-f]*:[0-9A-Fa-f]")


def handbook_pages() -> dict[str, list[list[str]]]:
    """Locale folder -> pages (each a list of paragraphs), from the pinned debian-handbook package."""
    import build_corpus

    pin = next(p for p in build_corpus.PINS if p.package == "debian-handbook")
    build_corpus.fetch([pin])
    root = build_corpus.unpack(pin)
    pages: dict[str, list[list[str]]] = {}
    for folder in sorted({v[0] for v in LOCALES.values() if v[0]}):
        for path in sorted((root / folder).glob("*.html")):
            paragraphs = _paragraphs(build_corpus.page_text(str(path)))
            if len(paragraphs) >= 4:
                pages.setdefault(folder, []).append(paragraphs)
    return pages


def wikipedia_pages() -> list[list[str]]:
    import pyarrow.parquet as pq

    pages = []
    for path in sorted((REPO / "sample" / "data" / "wikipedia").glob("*.parquet")):
        for text in pq.read_table(path, columns=["text"]).column("text").to_pylist():
            paragraphs = _paragraphs(text)
            if len(paragraphs) >= 4:
                pages.append(paragraphs)
    return pages


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if len(block) >= 60 and not _SKIP.search(block):
            out.append(block)
    return out


# --- generators of PII --------------------------------------------------------------------------------------


def luhn_digit(partial: str) -> str:
    total = 0
    for i, char in enumerate(reversed(partial)):
        d = int(char)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def card(rng: random.Random) -> str:
    issuer = rng.choice(["visa", "mastercard", "amex", "diners", "discover"])
    prefix, length, groups = {
        "visa": ("4", 16, (4, 4, 4, 4)),
        "mastercard": (str(rng.randint(51, 55)), 16, (4, 4, 4, 4)),
        "amex": (rng.choice(["34", "37"]), 15, (4, 6, 5)),
        "diners": (rng.choice(["36", "38", "300", "305"]), 14, (4, 6, 4)),
        "discover": ("6011", 16, (4, 4, 4, 4)),
    }[issuer]
    body = prefix + "".join(rng.choice("0123456789") for _ in range(length - len(prefix) - 1))
    digits = body + luhn_digit(body)
    sep = rng.choice([" ", " ", "-", ""])
    parts, i = [], 0
    for g in groups:
        parts.append(digits[i : i + g])
        i += g
    return sep.join(parts)


def iban(rng: random.Random, country: str) -> str:
    from beam_pipeline.filters.pii import IBAN_LENGTHS

    length = IBAN_LENGTHS[country]
    letters = {"GB": 4, "IE": 4, "NL": 4}.get(country, 0)
    bban = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(letters))
    bban += "".join(rng.choice("0123456789") for _ in range(length - 4 - letters))
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    check = 98 - int(numeric) % 97
    compact = f"{country}{check:02d}{bban}"
    if rng.random() < 0.6:
        return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))
    return compact


def ssn(rng: random.Random) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    digits = f"{area:03d}{rng.randint(1, 99):02d}{rng.randint(1, 9999):04d}"
    return digits


_FIRST = ["anna", "marco", "jean", "lucia", "pieter", "joao", "yuki", "mark", "sarah", "hans", "ines", "tom"]
_DOMAINS = {
    "en-US": ["example.com", "mail.example.org", "acme-corp.com"],
    "en-GB": ["example.co.uk", "mail.example.org.uk"],
    "de": ["beispiel.de", "firma-mueller.de", "web.example.de"],
    "fr": ["exemple.fr", "societe.example.fr"],
    "it": ["esempio.it", "azienda.example.it"],
    "es": ["ejemplo.es", "empresa.example.es"],
    "nl": ["voorbeeld.nl", "bedrijf.example.nl"],
    "pt-BR": ["exemplo.com.br", "empresa.example.com.br"],
    "ja": ["ezweb.ne.jp", "example.co.jp", "docomo.ne.jp"],
}


def email(rng: random.Random, locale: str) -> str:
    local = rng.choice(_FIRST) + rng.choice([".", "_", "", ""]) + rng.choice(_FIRST + [str(rng.randint(1, 99))])
    return f"{local}@{rng.choice(_DOMAINS[locale])}"


def phone(rng: random.Random, region: str) -> str:
    """A valid number of ``region`` in one of the formats written there."""
    import phonenumbers
    from phonenumbers import PhoneNumberFormat as F

    kind = rng.choice([phonenumbers.PhoneNumberType.FIXED_LINE, phonenumbers.PhoneNumberType.MOBILE])
    example = phonenumbers.example_number_for_type(region, kind)
    national = str(example.national_number)
    for _ in range(100):
        keep = max(2, len(national) - rng.randint(4, 6))
        candidate = national[:keep] + "".join(rng.choice("0123456789") for _ in range(len(national) - keep))
        number = phonenumbers.parse("+" + str(example.country_code) + candidate, None)
        if phonenumbers.is_valid_number(number):
            break
    else:
        number = example
    nat = phonenumbers.format_number(number, F.NATIONAL)
    intl = phonenumbers.format_number(number, F.INTERNATIONAL)
    e164 = phonenumbers.format_number(number, F.E164)
    code, significant = intl.split(" ", 1)
    styles = [nat, nat, nat, intl, intl, e164]
    if region == "US":
        area, rest = nat[1:4], nat[6:]
        styles += [f"{area}-{rest}", f"{area}.{rest.replace('-', '.')}", f"+1 {area}-{rest}", f"1-{area}-{rest}",
                   f"+1 {nat}", f"{area} {rest.replace('-', ' ')}",
                   f"{area}-{rest}x{rng.randint(2, 999)}", f"{nat} ext. {rng.randint(2, 99)}"]
    elif region in ("GB", "DE", "IT", "NL", "FR"):
        styles += [f"00{intl[1:]}"]
        if region != "IT":
            styles += [f"{code} (0){significant}"]
        if region in ("GB", "DE", "NL"):
            area, subscriber = nat.split(" ", 1)
            styles += [f"({area}) {subscriber}"]
        if region == "DE":
            area, subscriber = nat.split(" ", 1)
            styles += [f"{area}/{subscriber.replace(' ', '')}", f"{area} / {subscriber}", f"{area}-{subscriber}",
                       f"{code}-{area[1:]}-{subscriber}"]
        if region == "FR":
            styles += [nat.replace(" ", "."), nat.replace(" ", "\u00a0")]
        if region == "NL":
            area, subscriber = nat.split(" ", 1)
            styles += [f"{area}-{subscriber}"]
    elif region == "JP":
        area, exchange, line = nat.split("-")
        fullwidth = {ord(c): ord(c) + 0xFEE0 for c in "0123456789-()"}
        styles += [f"({area}) {exchange}-{line}", f"{area}({exchange}){line}", nat.translate(fullwidth)]
    elif region == "BR":
        area, rest = nat.split(" ", 1)
        styles += [f"{code} {area} {rest}", f"{area.strip('()')} {rest}"]
    elif region == "ES":
        n = e164[3:]
        styles += [f"{code} {n}", f"{n[:2]} {n[2:5]} {n[5:7]} {n[7:]}"]
    return rng.choice(styles)


# --- templates ----------------------------------------------------------------------------------------------

T = {  # locale -> kind -> sentence templates ({} is the value)
    "en-US": {
        "phone": ["Call us at {}.", "Phone: {}", "For support, call {} (Mon-Fri).", "Tel:{}",
                  "Our office ({}) is open from 9 to 5."],
        "email": ["Write to {} for details.", "Contact: {}", "Send your CV to {} by Friday."],
        "credit_card": ["Card number: {}", "Charged to card {} on file."],
        "iban": ["Wire the amount to IBAN {}.", "IBAN: {}"],
        "ssn": ["SSN {}", "SSN: {}", "Social Security number {}"],
    },
    "en-GB": {
        "phone": ["Tel: {}", "Ring us on {} for a quote.", "Telephone {} (office hours).", "Tel:{}",
                  "Our head office ({}) opens at 9am."],
        "email": ["Email {} for details.", "Contact: {}"],
        "credit_card": ["Card number: {}", "Paid with card {}."],
        "iban": ["Please pay to IBAN {}.", "IBAN: {}"],
    },
    "de": {
        "phone": ["Rufen Sie uns unter {} an.", "Telefon: {}", "Tel.: {}", "Tel:{}", "Fax {}",
                  "Unsere Zentrale ({}) ist werktags besetzt.", "Erreichbar unter {} (Mo-Fr)."],
        "email": ["E-Mail: {}", "Schreiben Sie an {}."],
        "credit_card": ["Kartennummer: {}", "Belastet auf Karte {}."],
        "iban": ["Bitte überweisen Sie auf IBAN {}.", "IBAN: {}"],
    },
    "fr": {
        "phone": ["Appelez le {}.", "Tél. : {}", "Téléphone : {}", "Tel:{}", "Notre standard ({}) est ouvert.",
                  "Joignable au {} du lundi au vendredi."],
        "email": ["Courriel : {}", "Écrivez à {}."],
        "credit_card": ["Numéro de carte : {}", "Débité sur la carte {}."],
        "iban": ["Virement sur l'IBAN {}.", "IBAN : {}"],
    },
    "it": {
        "phone": ["Chiamare il numero {}.", "Tel. {}", "Telefono: {}", "Tel:{}", "La sede centrale ({}) è aperta.",
                  "Cellulare {}"],
        "email": ["E-mail: {}", "Scrivete a {}."],
        "credit_card": ["Numero di carta: {}", "Addebitato sulla carta {}."],
        "iban": ["Bonifico sull'IBAN {}.", "IBAN: {}"],
    },
    "es": {
        "phone": ["Llámenos al {}.", "Teléfono: {}", "Tel.: {}", "Tel:{}", "Nuestra oficina ({}) abre a las 9.",
                  "Móvil {}"],
        "email": ["Correo: {}", "Escriba a {}."],
        "credit_card": ["Número de tarjeta: {}", "Cargado a la tarjeta {}."],
        "iban": ["Transferencia al IBAN {}.", "IBAN: {}"],
    },
    "nl": {
        "phone": ["Bel ons op {}.", "Telefoon: {}", "Tel.: {}", "Tel:{}", "Ons kantoor ({}) is open.",
                  "Bereikbaar op {} (ma-vr)."],
        "email": ["E-mail: {}", "Schrijf naar {}."],
        "credit_card": ["Kaartnummer: {}", "Afgeschreven van kaart {}."],
        "iban": ["Maak het bedrag over naar IBAN {}.", "IBAN: {}"],
    },
    "pt-BR": {
        "phone": ["Ligue para {}.", "Telefone: {}", "Tel.: {}", "Tel:{}", "Nossa central ({}) atende das 8h às 18h.",
                  "WhatsApp {}"],
        "email": ["E-mail: {}", "Escreva para {}."],
        "credit_card": ["Número do cartão: {}", "Cobrado no cartão {}."],
        "iban": ["Transferência para o IBAN {}.", "IBAN: {}"],
    },
    "ja": {
        "phone": ["お電話は{}まで。", "電話：{}", "TEL {}", "Tel:{}", "代表{}（平日9時～17時）", "携帯{}"],
        "email": ["お問い合わせは{}まで。", "メール：{}", "連絡先{}へどうぞ。"],
        "credit_card": ["カード番号：{}", "カード{}で決済しました。"],
        "iban": ["振込先IBAN：{}", "IBAN {}"],
    },
}

_ORDER_LABELS = {
    "en-US": ["Order #", "order no. ", "Invoice ", "Ref. "], "en-GB": ["Order no. ", "Invoice ", "Ref. "],
    "de": ["Bestellnummer ", "Auftrag ", "Rechnung Nr. ", "Kundennummer "],
    "fr": ["Commande n° ", "Facture ", "Réf. "], "it": ["Ordine n. ", "Fattura ", "Rif. "],
    "es": ["Pedido nº ", "Factura ", "Ref. "], "nl": ["Bestelling ", "Factuur ", "Ref. "],
    "pt-BR": ["Pedido nº ", "Nota fiscal ", "Ref. "], "ja": ["注文番号：", "請求番号 ", "ID "],
}


def isbn13(rng: random.Random) -> str:
    body = "978" + "".join(rng.choice("0123456789") for _ in range(9))
    check = (10 - sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(body)) % 10) % 10
    d = body + str(check)
    return rng.choice([f"{d[:3]}-{d[3]}-{d[4:6]}-{d[6:12]}-{d[12]}", d, f"{d[:3]}-{d[3:5]}-{d[5:9]}-{d[9:12]}-{d[12]}"])


def isbn10(rng: random.Random) -> str:
    body = "".join(rng.choice("0123456789") for _ in range(9))
    check = sum((10 - i) * int(c) for i, c in enumerate(body)) % 11
    last = "X" if (11 - check) % 11 == 10 else str((11 - check) % 11)
    return f"{body[0]}-{body[1:3]}-{body[3:9]}-{last}"


def negative(rng: random.Random, locale: str, region: str) -> tuple[str, str]:
    """(kind of look-alike, sentence)."""
    kind = rng.choice(["version", "oid", "isbn", "date", "timestamp", "order", "table", "amount", "hash",
                       "luhn_fail"])
    y, m, d = rng.randint(1990, 2025), rng.randint(1, 12), rng.randint(1, 28)
    if kind == "version":
        value = rng.choice([f"{rng.randint(0, 12)}.{rng.randint(0, 30)}.{rng.randint(0, 20)}",
                            f"10.0.{rng.randint(10000, 22000)}.{rng.randint(256, 4000)}",
                            f"{rng.randint(2, 6)}.{rng.randint(0, 19)}.{rng.randint(0, 99)}-{rng.randint(1, 30)}-amd64",
                            f"0.{rng.randint(1, 40)}.{rng.randint(0, 9)}"])
        return kind, f"Version {value}"
    if kind == "oid":
        return kind, f"OID 1.3.6.1.4.1.{rng.randint(1, 60000)}.{rng.randint(1, 99)}.{rng.randint(1, 9)}"
    if kind == "isbn":
        return kind, f"ISBN {rng.choice([isbn13(rng), isbn10(rng)])}"
    if kind == "date":
        value = rng.choice([f"{d:02d}.{m:02d}.{y}", f"{m:02d}/{d:02d}/{y}", f"{y}-{m:02d}-{d:02d}",
                            f"{d:02d}/{m:02d}/{y}", f"{d:02d}-{m:02d}-{y}", f"{y}年{m}月{d}日", f"{d}. {m}. {y}"])
        return kind, f"({value})"
    if kind == "timestamp":
        value = rng.choice([f"{y}-{m:02d}-{d:02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
                            f"{y}-{m:02d}-{d:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
                            str(rng.randint(1_000_000_000, 1_800_000_000)),
                            f"{y}{m:02d}{d:02d}{rng.randint(0, 235959):06d}"])
        return kind, f"[{value}]"
    if kind == "order":
        label = rng.choice(_ORDER_LABELS[locale])
        value = rng.choice([
            f"{rng.randint(100, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
            f"{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}-{rng.randint(10, 99)}",
            f"00{rng.randint(10000000, 99999999)}",
            f"{y}/{rng.randint(100000, 999999)}",
            phone(rng, region) if not region == "US" else f"{rng.randint(200, 999)}-{rng.randint(200, 999)}-{rng.randint(1000, 9999)}",
        ])
        return kind, f"{label}{value}"
    if kind == "table":
        row = rng.choice([
            " | ".join(str(rng.randint(1, 9999)) for _ in range(5)),
            " ".join(f"{rng.randint(0, 99):02d}" for _ in range(5)),
            " ".join(f"{x:02d}" for x in range(rng.randint(0, 5), rng.randint(10, 14))),
            " ".join(str(y + i) for i in range(4)),
            " ".join(f"{rng.random():.2f}" for _ in range(5)),
            "\t".join(str(rng.randint(0, 99999)) for _ in range(4)),
        ])
        return kind, row
    if kind == "amount":
        value = rng.choice([f"{rng.randint(1, 999)} {rng.randint(0, 999):03d} {rng.randint(0, 999):03d}",
                            f"{rng.randint(1, 999)}.{rng.randint(0, 999):03d}.{rng.randint(0, 999):03d},{rng.randint(0, 99):02d}",
                            f"{rng.randint(1, 999)},{rng.randint(0, 999):03d},{rng.randint(0, 999):03d}"])
        return kind, f"Total: {value}"
    if kind == "hash":
        width = rng.choice([7, 32, 40, 64])
        value = "".join(rng.choice("0123456789abcdef") for _ in range(width))
        if rng.random() < 0.3:
            value = "".join(rng.choice("0123456789") for _ in range(width))
        return kind, f"commit {value}"
    digits = "4" + "".join(rng.choice("0123456789") for _ in range(14))
    bad = str((int(luhn_digit(digits)) + 1) % 10)
    return kind, f"Invoice {digits + bad}"


# --- documents ----------------------------------------------------------------------------------------------


def make_document(rng: random.Random, locale: str, pages: list[list[str]]) -> dict:
    """A document of real paragraphs with planted PII (gold spans) and hard negatives between them."""
    _, region, iban_countries = LOCALES[locale]
    page = rng.choice(pages)
    first = rng.randrange(max(1, len(page) - 6))
    paragraphs = page[first : first + rng.randint(3, 8)]
    inserts: list[tuple[str, list[tuple[str, str]], str | None]] = []  # (template, [(kind, value)], negative)
    kinds = [k for k in KINDS if k in T[locale]]
    for _ in range(rng.choice([0, 1, 2, 2, 3, 4])):
        kind = rng.choice(kinds + ["phone"] * 3)  # phones are the hard case: half the planted items
        template = rng.choice(T[locale][kind])
        if kind == "phone":
            values = [("phone", phone(rng, region))]
        elif kind == "email":
            values = [("email", email(rng, locale))]
        elif kind == "credit_card":
            values = [("credit_card", card(rng))]
        elif kind == "iban":
            values = [("iban", iban(rng, rng.choice(iban_countries)))]
            if rng.random() < 0.25:  # two in a row
                values.append(("iban", iban(rng, rng.choice(iban_countries))))
        else:
            value = ssn(rng)
            if template == "SSN {}" and rng.random() < 0.5:
                value = f"{value[:3]}-{value[3:5]}-{value[5:]}"
            elif template.startswith("Social"):
                value = f"{value[:3]} {value[3:5]} {value[5:]}"
            values = [("ssn", value)]
        inserts.append((template, values, None))
    for _ in range(rng.choice([1, 2, 3, 4])):
        neg_kind, sentence = negative(rng, locale, region)
        inserts.append(("{}", [("", sentence)], neg_kind))
    pieces: list[str] = []
    gold: list[tuple[int, int, str]] = []
    negatives: list[tuple[int, int, str]] = []
    slots = [rng.randrange(len(paragraphs) + 1) for _ in inserts]
    position = 0

    def add(text: str) -> None:
        nonlocal position
        pieces.append(text)
        position += len(text)

    sep = "" if locale == "ja" else " "
    for p_index in range(len(paragraphs) + 1):
        for (template, values, neg_kind), slot in zip(inserts, slots):
            if slot != p_index:
                continue
            before, after = template.split("{}")
            add(before)
            for j, (kind, value) in enumerate(values):
                if j:
                    add(" ")
                start = position
                add(value)
                if neg_kind is None:
                    gold.append((start, position, kind))
                else:
                    negatives.append((start, position, neg_kind))
            add(after + "\n\n")
        if p_index < len(paragraphs):
            add(paragraphs[p_index] + sep + "\n\n")
    return {"locale": locale, "text": "".join(pieces), "gold": gold, "negatives": negatives}


def build_set(seed: int, docs_per_locale: int) -> tuple[list[dict], dict[str, list[list[str]]]]:
    handbook = handbook_pages()
    wiki = wikipedia_pages()
    sources = {loc: (handbook[folder] if folder else wiki) for loc, (folder, _, _) in LOCALES.items()}
    documents = []
    for locale in LOCALES:
        for i in range(docs_per_locale):
            documents.append(make_document(random.Random(f"{seed}:{locale}:{i}"), locale, sources[locale]))
    return documents, sources


# --- scoring ------------------------------------------------------------------------------------------------


def score(documents: list[dict], detect) -> dict:
    per_kind: dict[str, Counter] = defaultdict(Counter)
    per_locale: dict[str, Counter] = defaultdict(Counter)
    per_negative: Counter = Counter()
    negatives_total: Counter = Counter()
    exact = 0
    false_positives, false_negatives = [], []
    for doc in documents:
        text = doc["text"]
        found = detect(text)
        matched_gold: set[int] = set()
        for start, end, kind in found:
            hit = next((i for i, (gs, ge, gk) in enumerate(doc["gold"])
                        if gk == kind and i not in matched_gold and start < ge and gs < end), None)
            if hit is None:
                per_kind[kind]["fp"] += 1
                per_locale[doc["locale"]]["fp"] += 1
                where = next((nk for ns, ne, nk in doc["negatives"] if start < ne and ns < end), "real text")
                per_negative[where] += 1
                false_positives.append((doc["locale"], kind, where, text[max(0, start - 30) : end + 10]))
            else:
                matched_gold.add(hit)
                per_kind[kind]["tp"] += 1
                per_locale[doc["locale"]]["tp"] += 1
                exact += (start, end) == doc["gold"][hit][:2]
        for i, (gs, ge, gk) in enumerate(doc["gold"]):
            if i not in matched_gold:
                per_kind[gk]["fn"] += 1
                per_locale[doc["locale"]]["fn"] += 1
                false_negatives.append((doc["locale"], gk, text[max(0, gs - 30) : ge + 10]))
        for _, _, nk in doc["negatives"]:
            negatives_total[nk] += 1
    micro = Counter()
    for c in per_kind.values():
        micro.update(c)
    return {
        "per_kind": {k: prf(c) for k, c in sorted(per_kind.items())},
        "per_locale": {k: prf(per_locale[k]) for k in LOCALES},
        "micro": prf(micro),
        "exact_spans": exact,
        "negatives": {k: {"planted": negatives_total[k], "flagged": per_negative[k]} for k in sorted(negatives_total)},
        "fp_in_real_text": per_negative["real text"],
        "false_positives": false_positives,
        "false_negatives": false_negatives,
    }


def prf(c: Counter) -> dict:
    tp, fp, fn = c["tp"], c["fp"], c["fn"]
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4)}


def throughput(texts: list[str], module, repeat: int = 3) -> dict:
    """CPU seconds of ``module.counts`` over ``texts``, best of ``repeat``; the phone validation's cache is emptied
    before each pass (the bench's numbers would all be in it after the first)."""
    size = sum(len(t.encode("utf-8")) for t in texts)
    counts = module.counts
    counts(texts[0])  # compile the loops, load the metadata
    best = float("inf")
    for _ in range(repeat):
        _clear_caches(module)
        start = time.process_time()
        for t in texts:
            counts(t)
        best = min(best, time.process_time() - start)
    return {"mb": round(size / 1e6, 2), "docs": len(texts), "cpu_seconds": round(best, 3),
            "mb_per_s": round(size / 1e6 / best, 2)}


def _clear_caches(module) -> None:
    """Empty the phone validator's cache of the package ``module`` (a pii module) was loaded from."""
    phones = sys.modules.get(module.__name__.rpartition(".")[0] + ".phones")
    if phones is not None:  # None: a revision before filters/phones.py
        phones._valid.cache_clear()


BEFORE_PACKAGE = "pii_before"


def load_pii(rev: str | None):
    """The pii module of the work tree, or of git revision ``rev``.

    A revision's detector is more than ``pii.py`` (the number detectors and the phone validator are
    modules beside it), so the revision's whole ``beam_pipeline/filters/`` is exported into a temporary
    package named :data:`BEFORE_PACKAGE`, with its imports of ``beam_pipeline.filters`` pointed there;
    the rest of ``beam_pipeline`` is the work tree's.
    """
    from beam_pipeline.filters import pii

    if rev is None:
        return pii
    folder = tempfile.mkdtemp(prefix="pii-before-")
    archive = subprocess.run(["git", "archive", rev, "beam_pipeline/filters"], cwd=REPO, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    package = os.path.join(folder, BEFORE_PACKAGE)
    os.rename(os.path.join(folder, "beam_pipeline", "filters"), package)
    for name in os.listdir(package):
        if name.endswith(".py"):
            path = os.path.join(package, name)
            with open(path, encoding="utf-8") as f:
                source = f.read()
            source = re.sub(r"\bbeam_pipeline\.filters\b", BEFORE_PACKAGE, source)
            source = source.replace("from beam_pipeline import filters", f"import {BEFORE_PACKAGE} as filters")
            with open(path, "w", encoding="utf-8") as f:
                f.write(source)
    sys.path.insert(0, folder)
    return importlib.import_module(f"{BEFORE_PACKAGE}.pii")


def real_text_documents(sources: dict[str, list[list[str]]], per_locale_mb: float) -> list[str]:
    """Unplanted real text: each locale's pages as documents (paragraphs joined), up to per_locale_mb."""
    texts = []
    for locale in LOCALES:
        size = 0
        for page in sources[locale]:
            text = "\n\n".join(page)
            texts.append(text)
            size += len(text.encode("utf-8"))
            if size >= per_locale_mb * 1e6:
                break
    return texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--docs", type=int, default=150, help="documents per locale")
    parser.add_argument("--before", default="HEAD", help="git revision of pii.py to compare ('' for none)")
    parser.add_argument("--real-mb", type=float, default=1.5, help="MB of unplanted real text per locale")
    parser.add_argument("--out", default=None, help="results file stem (default bench/results/pii-<date>)")
    args = parser.parse_args()
    command = " ".join([".venv/bin/python bench/bench_pii.py"] + sys.argv[1:])

    documents, sources = build_set(args.seed, args.docs)
    real = real_text_documents(sources, args.real_mb)
    results: dict = {"command": command, "seed": args.seed, "docs": len(documents),
                     "gold": sum(len(d["gold"]) for d in documents),
                     "negatives": sum(len(d["negatives"]) for d in documents),
                     "text_mb": round(sum(len(d["text"].encode()) for d in documents) / 1e6, 2),
                     "load": os.getloadavg(), "variants": {}}
    variants = [("after", None)] + ([("before", args.before)] if args.before else [])
    modules = {name: load_pii(rev) for name, rev in variants}
    for name, module in modules.items():
        results["variants"][name] = score(documents, lambda t, m=module: m.detect(t, m.KINDS))
    bench_texts = [d["text"] for d in documents]
    for key, texts in (("throughput_real", real), ("throughput_bench", bench_texts)):
        for _ in range(3):  # interleaved rounds, the best of each variant: the machine is shared
            for name, module in modules.items():
                measured = throughput(texts, module, repeat=1)
                best = results["variants"][name].get(key)
                if best is None or measured["cpu_seconds"] < best["cpu_seconds"]:
                    results["variants"][name][key] = measured
    for name, scored in results["variants"].items():
        print(name, json.dumps({k: scored[k] for k in ("micro", "per_kind", "throughput_bench", "throughput_real")}),
              flush=True)
    results["load_end"] = os.getloadavg()
    stem = args.out or str(REPO / "bench" / "results" / f"pii-{datetime.date.today():%Y%m%d}")
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
    with open(stem + ".md", "w") as f:
        f.write(report(results))
    print("wrote", stem + ".md")
    return 0


def report(results: dict) -> str:
    after = results["variants"]["after"]
    before = results["variants"].get("before")
    lines = [f"# PII bench ({datetime.date.today():%Y-%m-%d})", "", "```", results["command"], "```", "",
             f"{results['docs']} documents (9 locales), {results['text_mb']} MB, {results['gold']} planted PII, "
             f"{results['negatives']} planted hard negatives, seed {results['seed']}; load average "
             f"{results['load'][0]:.1f} at start, {results['load_end'][0]:.1f} at end (2 cores, shared).", ""]

    def row(name, m):
        return f"| {name} | {m['tp']} | {m['fp']} | {m['fn']} | {m['precision']:.4f} | {m['recall']:.4f} | {m['f1']:.4f} |"

    for title, key in (("Per kind", "per_kind"), ("Per locale", "per_locale")):
        lines += [f"## {title}", "", "| | TP | FP | FN | precision | recall | F1 |", "|---|---:|---:|---:|---:|---:|---:|"]
        for name, m in after[key].items():
            lines.append(row(name, m))
        lines.append(row("**micro**", after["micro"]))
        lines.append("")
    if before:
        lines += ["## Before (the detector at `--before`)", "", "| | TP | FP | FN | precision | recall | F1 |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, m in before["per_kind"].items():
            lines.append(row(name, m))
        lines.append(row("**micro**", before["micro"]))
        lines += ["", "| locale | recall before | recall after |", "|---|---:|---:|"]
        for loc in LOCALES:
            lines.append(f"| {loc} | {before['per_locale'][loc]['recall']:.4f} | {after['per_locale'][loc]['recall']:.4f} |")
        lines.append("")
    lines += ["## Hard negatives", "", "| look-alike | planted | flagged after |" + (" flagged before |" if before else ""),
              "|---|---:|---:|" + ("---:|" if before else "")]
    for name, n in after["negatives"].items():
        extra = f" {before['negatives'].get(name, {}).get('flagged', 0)} |" if before else ""
        lines.append(f"| {name} | {n['planted']} | {n['flagged']} |{extra}")
    extra = f" {before['fp_in_real_text']} |" if before else ""
    lines.append(f"| (unplanted real text) | - | {after['fp_in_real_text']} |{extra}")
    lines += ["", f"Exact span matches after: {after['exact_spans']} of {after['micro']['tp']} true positives.", "",
              "## Throughput (`pii.counts`, every kind, one core, CPU seconds, best of 3 interleaved rounds)", "",
              "| text | MB | docs | after MB/s | " + ("before MB/s |" if before else ""),
              "|---|---:|---:|---:|" + ("---:|" if before else "")]
    for key, label in (("throughput_real", "unplanted real text"), ("throughput_bench", "bench documents")):
        a = after[key]
        extra = f" {before[key]['mb_per_s']} |" if before else ""
        lines.append(f"| {label} | {a['mb']} | {a['docs']} | {a['mb_per_s']} |{extra}")
    lines += ["", "## Errors after (all)", ""]
    for loc, kind, where, ctx in after["false_positives"]:
        lines.append(f"- FP {loc} {kind} in {where}: `{ctx!r}`")
    for loc, kind, ctx in after["false_negatives"]:
        lines.append(f"- FN {loc} {kind}: `{ctx!r}`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
