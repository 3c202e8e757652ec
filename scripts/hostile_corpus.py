#!/usr/bin/env python3
"""Writes the adversarial corpus: tests/data/hostile/NAME.eml.gz and tests/data/hostile/README.md.

    scripts/hostile_corpus.py [--out DIR] [--scale F]

Each message is built to make one stage of the scan do as much work as a sender can make it do
within what the daemon accepts (`[limits] max_message_bytes`, 50 MB; the HTTP body limit, 50 MB):
long anchors and host labels, 100 k URLs, 10 k MIME parts, nesting 1,000 deep, 1 MB header
lines, 50 k recipients, broken charsets and encodings, zip-like HTML, pathological base64 and
quoted-printable, look-alike words at scale. tests/hostile.rs scans every file with the default
rules; scripts/bench_hostile.sh times them.

The output is deterministic: no randomness but a fixed xorshift, and gzip with mtime 0 and no
file name, so running the script again rewrites the same bytes (with the same zlib). Messages
are in the SMTP wire form (CRLF); most are repetitive, so the committed files stay small.
"""
import argparse
import gzip
import io
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1024 * 1024

MESSAGES = []

# Sizes and counts are multiplied by this (`--scale`): a message whose scan costs more than
# twice as much at twice the size grows super-linearly.
SCALE = 1.0


def S(n):
    return max(1, int(n * SCALE))


def message(name, attacks):
    """Registers a generator of one message; `attacks` is its line in the README."""

    def wrap(fn):
        MESSAGES.append((name, attacks, fn))
        return fn

    return wrap


class XorShift:
    """xorshift64*: the same stream on every Python version (unlike `random`'s helpers)."""

    def __init__(self, seed):
        self.s = seed or 1

    def next(self):
        s = self.s
        s ^= (s >> 12)
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= (s >> 27)
        self.s = s
        return (s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        return self.next() % n


def headers(name, subject="Account notice", extra=(), content_type="text/plain; charset=utf-8",
            cte=None, skip=()):
    """The top-level header block, CRLF-terminated, without the blank line."""
    h = [
        ("Return-Path", "<bounce@sender.example>"),
        ("Received", "from mail.sender.example (mail.sender.example [192.0.2.10]) by "
                     "mx.example.org with ESMTP id 4Q1; Thu, 01 Jan 2026 00:00:00 +0000"),
        ("From", "\"Sender\" <news@sender.example>"),
        ("To", "rcpt@example.org"),
        ("Subject", subject),
        ("Date", "Thu, 01 Jan 2026 00:00:00 +0000"),
        ("Message-ID", f"<hostile-{name}@sender.example>"),
        ("MIME-Version", "1.0"),
    ]
    if content_type is not None:
        h.append(("Content-Type", content_type))
    if cte is not None:
        h.append(("Content-Transfer-Encoding", cte))
    h = [(k, v) for k, v in h if k not in skip]
    h.extend(extra)
    return "".join(f"{k}: {v}\r\n" for k, v in h).encode()


def crlf(text):
    return text.replace("\r\n", "\n").replace("\n", "\r\n").encode()


def wrap_lines(text, width=76):
    return "\r\n".join(text[i:i + width] for i in range(0, len(text), width))


def b64(data):
    import base64
    return base64.b64encode(data).decode()


# ---- long anchors and labels ----

@message("phishing_long_anchor",
         "8 KB text/html whose only link has the anchor text `x.` + 8,000 × `a` + `.com/x`: a "
         "pattern that tests whether an anchor text looks like an address (rule PHISHING) "
         "backtracks over it")
def phishing_long_anchor(name):
    anchor = "x." + "a" * S(8000) + ".com/x"
    html = ("<html><body><p>Dear customer, your account is on hold. Please confirm your "
            f"details:</p>\n<p><a href=\"http://login.bank-secure.example/verify\">{anchor}</a></p>"
            "\n<p>Thank you.</p></body></html>\n")
    return headers(name, "Confirm your account", content_type="text/html; charset=utf-8") \
        + b"\r\n" + crlf(html)


@message("anchors_2000_long_text",
         "2,000 links (`max_html_links`) whose anchor texts look like addresses of 500 "
         "characters (`x.aaa…a.com/x`) and go elsewhere, and one link whose text is 1 MB of "
         "words: anchor pairing, and every rule that reads each anchor's text")
def anchors_2000_long_text(name):
    out = ["<html><body><p>Your statements:</p>\n"]
    for i in range(S(2000)):
        out.append(f"<a href=\"http://t{i % 100}.track.example/c\">x{i % 100}."
                   + "a" * S(500) + ".com/x</a><br>\n")
    out.append("<a href=\"http://login.bank-secure.example/\">"
               + words(S(MB), VOCAB, XorShift(9)) + "</a>\n</body></html>\n")
    return headers(name, "Statements", content_type="text/html; charset=utf-8") + b"\r\n" \
        + crlf("".join(out))


@message("host_label_10k",
         "a URL host with one 10,000-character label, as text, href and anchor text (URL "
         "scanner, WHATWG parser, IDNA, public suffix lookup, anchor matching)")
def host_label_10k(name):
    host = "a" * S(10000) + ".com"
    url = f"http://{host}/path?q=1"
    text = f"Visit {url} today.\n"
    html = f"<html><body><p>Visit <a href=\"{url}\">{url}</a> today.</p></body></html>\n"
    return multipart_alternative(name, "Long label", text, html)


@message("host_labels_2000",
         "a URL host of 2,000 labels (`a.a.a…com`), as text, href and anchor text")
def host_labels_2000(name):
    host = "a." * S(2000) + "com"
    url = f"http://{host}/x"
    text = f"Visit {url} today. Or www.{host} or user@{host}\n"
    html = f"<html><body><p>Visit <a href=\"{url}\">{host}</a> today.</p></body></html>\n"
    return multipart_alternative(name, "Many labels", text, html)


def multipart_alternative(name, subject, text, html):
    b = "alt-boundary-1"
    body = (f"--{b}\nContent-Type: text/plain; charset=utf-8\n\n{text}\n"
            f"--{b}\nContent-Type: text/html; charset=utf-8\n\n{html}\n--{b}--\n")
    return headers(name, subject, content_type=f"multipart/alternative; boundary=\"{b}\"") \
        + b"\r\n" + crlf(body)


# ---- many URLs ----

URL_FORMS = ["http://x{}.io/", "www.w{}.io", "https://s{}.io/?a=1", "m{}@x.io"]


@message("urls_100k_text",
         "100,000 URLs in text/plain (1.5 MB, under `max_text_bytes`; 2,000 distinct, twice "
         "the per-message URL cap), scheme-less ones and addresses among them: URL scanner, "
         "linkify, the URL and address caps")
def urls_100k_text(name):
    lines = []
    for i in range(0, S(100_000), 10):
        lines.append(" ".join(URL_FORMS[j % 4].format(j % 2000) for j in range(i, i + 10)))
    return headers(name, "Links") + b"\r\n" + crlf("\n".join(lines) + "\n")


@message("urls_100k_html",
         "100,000 `<a href>` links in text/html (6 MB; 400 distinct hosts), each with a "
         "domain-like anchor text: HTML scanner, `max_html_links`, anchor pairing")
def urls_100k_html(name):
    out = ["<html><body>\n"]
    for i in range(S(100_000)):
        h = i % 400
        out.append(f"<a href=\"http://h{h}.example.net/p{h}\">shop{h}.example.com</a>\n")
    out.append("</body></html>\n")
    return headers(name, "Links", content_type="text/html; charset=utf-8") + b"\r\n" \
        + crlf("".join(out))


@message("url_scanner_tricks",
         "1.5 MB of text that keeps URL and address scanners guessing: `a@a@a…`, `a.a.a…`, "
         "`http://http://…`, `www.www.…`, long runs of `:/` and `@.`")
def url_scanner_tricks(name):
    chunks = [
        "a@" * 100_000,
        "\n",
        "a." * 100_000,
        "\n",
        "http://" * 20_000,
        "\n",
        "www." * 40_000,
        "\n",
        ":/" * 100_000,
        "\n",
        "@." * 100_000,
        "\n",
        "x" * 100_000 + "@" + "y" * 100_000 + ".com",
        "\n",
        "https://" + "-" * 100_000 + ".com",
        "\n",
    ]
    return headers(name, "Tricks") + b"\r\n" + crlf("".join(chunks))


# ---- MIME structure ----

@message("parts_10k",
         "10,000 MIME parts in one multipart/mixed: text parts and named attachments "
         "alternating (`max_parts`, attachment hashing)")
def parts_10k(name):
    b = "mixed-boundary-10k"
    out = []
    for i in range(S(10_000)):
        if i % 2 == 0:
            out.append(f"--{b}\nContent-Type: text/plain; charset=utf-8\n\nPart {i} text.\n")
        else:
            out.append(f"--{b}\nContent-Type: application/octet-stream; name=\"f{i}.pdf.exe\"\n"
                       f"Content-Disposition: attachment; filename=\"f{i}.pdf.exe\"\n"
                       f"Content-Transfer-Encoding: base64\n\nTVqQAAMAAAAEAAAA//8AALgAAAAA{i:06d}\n")
    out.append(f"--{b}--\n")
    return headers(name, "Parts", content_type=f"multipart/mixed; boundary=\"{b}\"") + b"\r\n" \
        + crlf("".join(out))


@message("nesting_1000",
         "multiparts nested 1,000 deep, each level with its own boundary and a text part "
         "(`max_depth`, the boundary checks of every level)")
def nesting_1000(name):
    depth = S(1000)
    out = []
    for d in range(depth):
        out.append(f"--b{d}\nContent-Type: text/plain\n\nLevel {d}.\n")
        out.append(f"--b{d}\nContent-Type: multipart/mixed; boundary=\"b{d + 1}\"\n\n")
    out.append(f"--b{depth}\nContent-Type: text/plain\n\nBottom.\n--b{depth}--\n")
    for d in range(depth - 1, -1, -1):
        out.append(f"--b{d}--\n")
    return headers(name, "Nested", content_type="multipart/mixed; boundary=\"b0\"") + b"\r\n" \
        + crlf("".join(out))


@message("nesting_1000_same_boundary",
         "multiparts nested 1,000 deep that all share one boundary, never closed")
def nesting_1000_same_boundary(name):
    out = []
    for d in range(S(1000)):
        out.append(f"--b\nContent-Type: multipart/mixed; boundary=\"b\"\n\n")
    out.append("--b\nContent-Type: text/plain\n\nBottom.\n")
    return headers(name, "Nested", content_type="multipart/mixed; boundary=\"b\"") + b"\r\n" \
        + crlf("".join(out))


@message("nesting_1000_rfc822",
         "message/rfc822 attachments nested 1,000 deep, each a whole message with headers")
def nesting_1000_rfc822(name):
    depth = S(1000)
    inner = crlf("From: a@inner.example\nSubject: bottom\n\nBottom.\n")
    for d in range(depth - 1, -1, -1):
        b = f"r{d}"
        inner = crlf(f"From: level{d}@inner.example\nSubject: level {d}\nMIME-Version: 1.0\n"
                     f"Content-Type: multipart/mixed; boundary=\"{b}\"\n\n"
                     f"--{b}\nContent-Type: text/plain\n\nLevel {d}.\n"
                     f"--{b}\nContent-Type: message/rfc822\n\n") + inner \
            + crlf(f"\n--{b}--\n")
    return headers(name, "Forwarded", content_type="message/rfc822") + b"\r\n" + inner


# ---- huge header lines ----

def words(n_bytes, vocab, rng, block=16 * 1024):
    """About `n_bytes` of words drawn from `vocab`: a random block (16 KB), repeated, so gzip's
    32 KB window finds the repeats and the committed file stays small."""
    out = []
    size = 0
    while size < min(n_bytes, block):
        w = vocab[rng.below(len(vocab))]
        out.append(w)
        size += len(w) + 1
    return repeat(" ".join(out), n_bytes, " ")


def repeat(block, n_bytes, sep):
    """`block` repeated (joined by `sep`) up to about `n_bytes` bytes of UTF-8."""
    unit = len(block.encode()) + len(sep)
    return sep.join([block] * max(1, n_bytes // unit))


VOCAB = ["free", "money", "click", "here", "now", "viagra", "winner", "account", "verify",
         "password", "urgent", "offer", "limited", "time", "cash", "bonus", "claim", "prize",
         "lottery", "bank", "transfer", "million", "dollars", "congratulations", "unsubscribe"]


@message("subject_1mb",
         "a 1 MB Subject line of spam words: decoding, normalization, subject shingles and "
         "every rule that matches the subject")
def subject_1mb(name):
    subject = words(S(MB), VOCAB, XorShift(1))
    return headers(name, subject) + b"\r\nHello.\r\n"


@message("subject_punctuation_runs",
         "a Subject of 100 k `!`, 100 k `$`, 100 k spaces and 100 k `?!` around a few words")
def subject_punctuation_runs(name):
    subject = ("WIN " + "!" * S(100_000) + " CASH " + "$" * S(100_000) + " " * S(100_000) + " NOW"
               + "?!" * S(50_000) + " FREE!!!")
    return headers(name, subject) + b"\r\nHello.\r\n"


@message("header_1mb_mailer",
         "a 1 MB X-Mailer line (read by rules and hashed as the `mailer` shingle)")
def header_1mb_mailer(name):
    mailer = "Microsoft Outlook Express 6.00.2800.1106 " + words(S(MB), VOCAB, XorShift(2))
    return headers(name, "Hello", extra=[("X-Mailer", mailer)]) + b"\r\nHello.\r\n"


@message("header_1mb_unknown",
         "a 1 MB line of an unknown header, without a space, plus a 1 MB folded header of "
         "14,000 continuation lines")
def header_1mb_unknown(name):
    flat = "x" * S(MB)
    lines = [words(75, VOCAB, XorShift(i + 1)) for i in range(300)]
    folded = "\r\n\t".join(lines[i % 300] for i in range(S(14_000)))
    return headers(name, "Hello", extra=[("X-Filler", flat), ("X-Folded", folded)]) \
        + b"\r\nHello.\r\n"


@message("headers_100k",
         "100,000 header fields (1,000 distinct names): header lookups by name")
def headers_100k(name):
    extra = [(f"X-H{i % 1000}", f"value {i % 1000}") for i in range(S(100_000))]
    return headers(name, "Hello", extra=extra) + b"\r\nHello.\r\n"


@message("received_10k",
         "10,000 Received headers (200 distinct IPs, HELO names and time stamps, repeated): "
         "the Received chain, hop records, per-hop rules")
def received_10k(name):
    extra = []
    for n in range(S(10_000)):
        i = n % 200
        ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        extra.append(("Received", f"from h{i}.relay.example (h{i}.relay.example [{ip}]) by "
                                  f"mx{i}.relay.example with ESMTP id Q{i}; "
                                  f"Thu, 01 Jan 2026 00:{(i // 60) % 60:02d}:{i % 60:02d} +0000"))
    return headers(name, "Hello", extra=extra) + b"\r\nHello.\r\n"


@message("date_huge",
         "a 1 MB Date header: a valid date, then 1 MB of comment, 10,000 nested parentheses "
         "and zone-like words")
def date_huge(name):
    date = ("Thu, 01 Jan 2026 00:00:00 +0000 (" + "UTC GMT EST " * S(60_000) + ")" + "(" * S(10_000)
            + ")" * S(10_000) + " +0100" * S(20_000))
    return headers(name, "Hello", skip=("Date",), extra=[("Date", date)]) + b"\r\nHello.\r\n"


@message("message_id_huge",
         "a 1 MB Message-ID (`<` + 1 MB local part + `@` + a 10,000-label domain + `>`) and "
         "a 200 KB References of 10,000 ids")
def message_id_huge(name):
    mid = "<" + "a" * S(MB) + "@" + "b." * S(10_000) + "example>"
    refs = " ".join(f"<r{i}@sender.example>" for i in range(S(10_000)))
    return headers(name, "Hello", skip=("Message-ID",),
                   extra=[("Message-ID", mid), ("References", refs)]) + b"\r\nHello.\r\n"


@message("recipients_50k",
         "50,000 recipients: 25,000 in To and 25,000 in Cc (folded; 600 distinct), and "
         "50,000 distinct RCPT TO in the envelope (`user{i}@d{i % 97}.example` for i below "
         "50,000: tests/hostile.rs gives them)")
def recipients_50k(name):
    def addrs(start):
        return ",\r\n ".join(f"\"User {i % 600}\" <user{i % 600}@d{i % 600 % 97}.example>"
                             for i in range(start, start + S(25_000)))

    return headers(name, "Hello", skip=("To",),
                   extra=[("To", addrs(0)), ("Cc", addrs(S(25_000)))]) + b"\r\nHello.\r\n"


# ---- charsets and encodings ----

@message("encoded_words_broken",
         "a Subject and From of 20,000 broken RFC 2047 encoded words (unknown and empty "
         "charsets, bad base64, bad Q escapes, unterminated words, encoded words inside words)")
def encoded_words_broken(name):
    forms = [
        "=?x-unknown-charset?B?SGVsbG8=?=",
        "=?utf-8?B?@@@@?=",
        "=?utf-8?Q?=ZZ=Z=?=",
        "=??B?SGVsbG8=?=",
        "=?utf-8?X?abc?=",
        "=?utf-8?B?SGVsbG8",
        "x=?utf-8?Q?a?=y",
        "=?utf-16?B?2D3ePQ==?=",
        "=?iso-2022-jp?B?GyRCJCIbKEI=?=",
        "=?utf-7?Q?+AGEAYgBj-?=",
        "=?" + "c" * 200 + "?B?QUJD?=",
        "=?utf-8*en?Q?=E2=80=8B?=",
    ]
    rng = XorShift(3)
    subject = " ".join(forms[rng.below(len(forms))] for _ in range(S(20_000)))
    sender = " ".join(forms[rng.below(len(forms))] for _ in range(S(2_000))) + " <a@sender.example>"
    return headers(name, subject, skip=("From",), extra=[("From", sender)]) + b"\r\nHello.\r\n"


@message("charsets_invalid",
         "200 text parts with unknown, empty, huge or mismatched charsets (UTF-16 of odd "
         "length, UTF-8 with invalid bytes, ISO-2022-JP escapes gone wrong, RFC 2231 names "
         "with bad escapes)")
def charsets_invalid(name):
    b = "cs-boundary"
    bodies = [
        ("x-unknown-{i}", b"Hello unknown charset \xe9\xe8\xff\r\n"),
        ("", b"Empty charset \xc3\x28\r\n"),
        ("c" * S(5000), b"Huge charset name\r\n"),
        ("utf-16", b"\xff\xfeH\x00e\x00l\x00l\x00o\x00\x00\xd8!"),
        ("utf-8", b"Invalid \xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\x28 \xed\xa0\x80\r\n"),
        ("iso-2022-jp", b"\x1b$B$3$s\x1b(B \x1b$B\x1b$B\x1b$B$\r\n"),
        ("utf-7", b"+AGEAYgBj- +ZeVnLIqe- +++++---- +\r\n"),
        ("windows-1252", b"\x80\x81\x8d\x8f\x90\x9d caf\xe9\r\n"),
        ("\"utf-8\"; charset=koi8-r", b"\xc1\xc2\xd7\r\n"),
        ("gb18030", b"\x81\x30\x81\x30\x81\x30 \xfe\xff\xff\r\n"),
    ]
    out = []
    for i in range(200):
        cs, body = bodies[i % len(bodies)]
        cs = cs.replace("{i}", str(i))
        out.append(f"--{b}\r\nContent-Type: text/plain; charset=\"{cs}\"\r\n"
                   f"Content-Disposition: inline; filename*=x-bogus''%ZZ%{i:02x}%\r\n"
                   "Content-Transfer-Encoding: 8bit\r\n\r\n".encode() + body + b"\r\n")
    out.append(f"--{b}--\r\n".encode())
    return headers(name, "Charsets", content_type=f"multipart/mixed; boundary=\"{b}\"") \
        + b"\r\n" + b"".join(out)


@message("base64_one_line",
         "a text/plain body of 1 MB base64 on one line (decoder, then 750 KB of text through "
         "normalization, shingles and the rules)")
def base64_one_line(name):
    # a block of a multiple of 3 bytes keeps the base64 periodic (and the file small)
    block = words(12 * 1024, VOCAB, XorShift(4)).encode()
    block += b" " * (-len(block) % 3)
    text = block * (S(750 * 1024) // len(block))
    return headers(name, "Hello", cte="base64") + b"\r\n" + b64(text).encode() + b"\r\n"


@message("base64_padding_everywhere",
         "1 MB declared base64 where `=` is everywhere: `QQ==` groups, runs of `=`, `=` "
         "between every character")
def base64_padding_everywhere(name):
    body = ("QQ==" * S(40_000) + "\r\n" + "=" * S(200_000) + "\r\n" + "Q=" * S(100_000) + "\r\n"
            + "====QUJD" * S(40_000) + "\r\n")
    return headers(name, "Hello", cte="base64") + b"\r\n" + wrap_lines(body).encode() + b"\r\n"


@message("base64_garbage",
         "1 MB declared base64 that is mostly outside the alphabet (punctuation, 8-bit bytes, "
         "NULs), as the body and as an attachment")
def base64_garbage(name):
    rng = XorShift(5)
    block = bytes(rng.below(256) for _ in range(8 * 1024)).replace(b"\r", b"").replace(b"\n", b"")
    # whole lines a block, so the wrapped output repeats with the block
    block = block[:len(block) // 76 * 76]
    junk = block * (S(512 * 1024) // len(block))
    junk = b"\r\n".join(junk[i:i + 76] for i in range(0, len(junk), 76))
    b = "b64-garbage"
    return headers(name, "Hello", content_type=f"multipart/mixed; boundary=\"{b}\"") + b"\r\n" \
        + f"--{b}\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\n".encode() \
        + junk + f"\r\n--{b}\r\nContent-Type: application/pdf; name=\"x.pdf\"\r\n".encode() \
        + b"Content-Transfer-Encoding: base64\r\n\r\n" + junk + f"\r\n--{b}--\r\n".encode()


@message("qp_soft_breaks",
         "1 MB quoted-printable with a soft line break after every character")
def qp_soft_breaks(name):
    text = words(S(340 * 1024), VOCAB, XorShift(6), block=4 * 1024)
    body = "".join(c + "=\r\n" for c in text)
    return headers(name, "Hello", cte="quoted-printable") + b"\r\n" + body.encode() + b"\r\n"


@message("qp_equals_runs",
         "1 MB quoted-printable of `=` runs, `=3D` runs, invalid escapes (`=ZZ`, `=\\xff`) "
         "and a trailing `=`, as text/plain and text/html")
def qp_equals_runs(name):
    body = ("=" * S(200_000) + "\r\n" + "=3D" * S(70_000) + "\r\n" + "=ZZ=G1=\xff=" * S(20_000)
            + "\r\n" + "a=\r\n=\r\n=" * S(30_000) + "\r\n=")
    b = "qp-eq"
    return headers(name, "Hello", content_type=f"multipart/alternative; boundary=\"{b}\"") \
        + b"\r\n" + (f"--{b}\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: "
                     f"quoted-printable\r\n\r\n{body}\r\n--{b}\r\nContent-Type: text/html\r\n"
                     f"Content-Transfer-Encoding: quoted-printable\r\n\r\n<p>{body}</p>\r\n"
                     f"--{b}--\r\n").encode("latin-1")


# ---- HTML ----

def html_message(name, subject, html):
    return headers(name, subject, content_type="text/html; charset=utf-8") + b"\r\n" + crlf(html)


@message("html_unclosed_nesting",
         "1 MB of HTML: 100,000 unclosed nested `<div><b><a href=…>` and `<table><tr><td>` "
         "(an HTML scanner that keeps a stack)")
def html_unclosed_nesting(name):
    html = ("<html><body>" + "<div><b><i>" * S(40_000) + "<table><tr><td>" * S(20_000)
            + "<a href=\"http://deep.example.com/\">" * S(10_000) + "deep text</body></html>\n")
    return html_message(name, "Deep", html)


@message("html_attributes",
         "1 MB of tags with many attributes, one tag with 50,000 attributes and a 1 MB "
         "`href` value")
def html_attributes(name):
    tag = "<span a=1 b='2' c=\"3\" d e=f style=\"color:red\" data-x=\"&amp;&lt;\">"
    many = "<img " + " ".join(f"a{i}=\"{i % 1000}\"" for i in range(S(50_000))) + ">"
    href = "<a href=\"http://long.example.com/" + "p" * S(MB) + "\">click</a>"
    return html_message(name, "Attrs", "<html><body>" + tag * S(15_000) + many + href
                        + "</body></html>\n")


@message("html_entities",
         "1 MB of character references: named, decimal, hex, out of range, unterminated, "
         "unknown, and `&` alone")
def html_entities(name):
    unit = ("&amp;&lt;&gt;&nbsp;&#65;&#x41;&#0;&#xFFFFFFFF;&#99999999999;&notanentity;&amp"
            "&#x;&#;& &AElig&zwnj;&#x200B;&#8238;")
    return html_message(name, "Entities", "<html><body><p>" + unit * S(8_000) + "</p></body></html>\n")


@message("html_open_constructs",
         "HTML whose comments, CDATA, `<script>`, `<style>`, attribute quotes and tags never "
         "close, repeated over 1 MB, and 100,000 empty comments")
def html_open_constructs(name):
    html = ("<html><body>" + "<!---->" * S(100_000) + "<p>text</p>"
            + "<!-- <a href=http://c.example>" * S(10_000) + "<![CDATA[ " * S(10_000)
            + "<script>" * S(10_000) + "<style>" * S(10_000) + "<a href=\"http://q.example/" * S(10_000)
            + "<" * S(100_000) + "</" * S(50_000) + "\n")
    return html_message(name, "Open", html)


@message("html_hidden_text",
         "1 MB of HTML with text in every hiding construct (display:none, font-size:0, "
         "white-on-white, zero-width characters) around 20,000 links")
def html_hidden_text(name):
    unit = ("<span style=\"display:none\">hidden bank words</span>"
            "<font size=0 color=#ffffff>paypal verify</font>"
            "<a href=\"http://t{i}.track.example/c\">Click\u200b\u200chere</a>\n")
    html = "<html><body>" + "".join(unit.replace("{i}", str(i % 500)) for i in range(S(8_000))) \
        + "</body></html>\n"
    return html_message(name, "Hidden", html)


# ---- Unicode ----

CONFUSABLE = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "c": "\u0441",
              "x": "\u0445", "y": "\u0443", "i": "\u0456", "s": "\u0455"}
BRANDS = ["paypal", "apple", "microsoft", "amazon", "netflix", "office", "secure", "account",
          "password", "invoice", "access", "service", "express", "pcexpress"]


def confuse(word, rng):
    out = []
    for ch in word:
        if ch in CONFUSABLE and rng.below(2):
            out.append(CONFUSABLE[ch])
        else:
            out.append(ch)
    return "".join(out)


@message("confusables_1mb",
         "1 MB of words mixing Cyrillic look-alikes into Latin brand names (skeleton folding, "
         "`mixed_script_words`), and a 20 KB Subject of them")
def confusables_1mb(name):
    rng = XorShift(7)
    body_words = []
    size = 0
    while size < 16 * 1024:
        w = confuse(BRANDS[rng.below(len(BRANDS))] + str(rng.below(1000)), rng)
        body_words.append(w)
        size += len(w.encode()) + 1
    subject_words = []
    size = 0
    while size < 20_000:
        w = confuse(BRANDS[rng.below(len(BRANDS))], rng)
        subject_words.append(w)
        size += len(w.encode()) + 1
    subject = " ".join(subject_words)
    block = "\n".join(" ".join(body_words[i:i + 12]) for i in range(0, len(body_words), 12))
    return headers(name, subject) + b"\r\n" + crlf(repeat(block, S(MB), "\n") + "\n")


@message("confusables_distinct",
         "20,000 distinct look-alike words (brand names with Cyrillic letters and a number): "
         "a list of mixed-script words that grew with the text, and its search, made the scan "
         "quadratic")
def confusables_distinct(name):
    rng = XorShift(10)
    lines = []
    for i in range(0, S(20_000), 10):
        lines.append(" ".join(confuse(BRANDS[j % len(BRANDS)], rng) + str(j)
                              for j in range(i, i + 10)))
    return headers(name, "Accounts") + b"\r\n" + crlf("\n".join(lines) + "\n")


@message("unicode_invisibles",
         "1 MB of text with zero-width, bidi-override and combining characters between every "
         "letter (normalization, invisible stripping, NFKC)")
def unicode_invisibles(name):
    marks = ["\u200b", "\u200c", "\u200d", "\u2060", "\u202e", "\u202d", "\u0301", "\u0308",
             "\ufeff", "\u00ad"]
    rng = XorShift(8)
    text = words(5 * 1024, VOCAB, rng)
    block = "".join(c + marks[rng.below(len(marks))] for c in text)
    out = repeat(block, S(MB), "\n")
    return headers(name, "Z\u200be\u200br\u200bo \u202eeerf") + b"\r\n" + crlf(out + "\n")


def build(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    keep = set()
    rows = []
    for name, attacks, fn in MESSAGES:
        raw = fn(name)
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
            g.write(raw)
        path = os.path.join(out_dir, f"{name}.eml.gz")
        with open(path, "wb") as f:
            f.write(buf.getvalue())
        keep.add(f"{name}.eml.gz")
        rows.append((name, len(raw), len(buf.getvalue()), attacks))
    for f in os.listdir(out_dir):
        if f.endswith(".eml.gz") and f not in keep:
            os.remove(os.path.join(out_dir, f))
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(README_HEAD)
        f.write("| file | bytes | gzip | what it attacks |\n|---|---:|---:|---|\n")
        for name, size, gz, attacks in rows:
            f.write(f"| `{name}.eml.gz` | {size:,} | {gz:,} | {attacks} |\n")
    total = sum(r[2] for r in rows)
    print(f"{len(rows)} messages, {sum(r[1] for r in rows):,} bytes, {total:,} gzipped")


README_HEAD = """# Adversarial corpus

Written by `scripts/hostile_corpus.py` (do not edit by hand: change the script and run it again;
the output is byte-for-byte reproducible). Each message is what a sender could submit to make one
stage of the scan work as hard as it can, within what the daemon accepts (`[limits]
max_message_bytes` and the HTTP body limit, 50 MB each). `tests/hostile.rs` scans every file
through the pipeline with the default rules and requires a verdict without `RULE_TIMEOUT`,
`RULE_ERROR` or skipped rules; `scripts/bench_hostile.sh` prints each message's scan CPU in a
release build (the target: at most 50 ms each, BENCHMARKS.md).

"""

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="output directory (default tests/data/hostile; required with --scale)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply sizes and counts, to see how a scan's cost grows "
                         "(SHRIKE_HOSTILE_DIR=DIR scripts/bench_hostile.sh)")
    args = ap.parse_args()
    if args.scale != 1.0 and args.out is None:
        ap.error("--scale writes a corpus of other sizes: give --out")
    SCALE = args.scale
    build(args.out or os.path.join(ROOT, "tests", "data", "hostile"))
