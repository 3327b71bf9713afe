# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fingerprints of the primary keys in an OpenPGP public key block, to pin a repository's signing key."""
from __future__ import annotations

import base64
import binascii
import hashlib
import re

from ansible.errors import AnsibleFilterError

PUBLIC_KEY = 6


def _packets(data: bytes):
    """(tag, body) of each packet (RFC 9580 section 4.2, old and new formats)."""
    i = 0
    while i < len(data):
        first = data[i]
        if not first & 0x80:
            raise AnsibleFilterError(f"openpgp_fingerprints: not an OpenPGP packet at byte {i}.")
        if first & 0x40:  # new format
            tag, i = first & 0x3F, i + 1
            o1 = data[i]
            if o1 < 192:
                length, i = o1, i + 1
            elif o1 < 224:
                length, i = ((o1 - 192) << 8) + data[i + 1] + 192, i + 2
            elif o1 == 255:
                length, i = int.from_bytes(data[i + 1:i + 5], "big"), i + 5
            else:
                raise AnsibleFilterError("openpgp_fingerprints: partial body lengths are not used in key blocks.")
        else:  # old format
            tag, kind, i = (first >> 2) & 0x0F, first & 0x03, i + 1
            if kind == 3:
                length = len(data) - i
            else:
                size = (1, 2, 4)[kind]
                length, i = int.from_bytes(data[i:i + size], "big"), i + size
        if i + length > len(data):
            raise AnsibleFilterError("openpgp_fingerprints: the key block is cut short.")
        yield tag, data[i:i + length]
        i += length


def dearmor(text: str) -> bytes:
    """The binary packets of an ASCII-armoured block (or the input's bytes when it is not armoured)."""
    match = re.search(r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", text, re.S)
    if not match:
        raise AnsibleFilterError("openpgp_fingerprints: no '-----BEGIN PGP PUBLIC KEY BLOCK-----' in the key text.")
    body = match.group(1).split("\n\n", 1)[-1] if re.match(r"^[A-Za-z-]+: ", match.group(1)) else match.group(1)
    lines = [ln.strip() for ln in body.replace("\r", "").split("\n") if ln.strip() and not ln.startswith("=")]
    try:
        return base64.b64decode("".join(lines), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AnsibleFilterError(f"openpgp_fingerprints: the armoured key is not valid base64 ({exc}).") from None


def openpgp_fingerprints(text: str) -> list[str]:
    """Upper-case hex fingerprints of every primary public key in an ASCII-armoured key block (v4, v5 and v6)."""
    if not isinstance(text, str):
        raise AnsibleFilterError(f"openpgp_fingerprints expects the key's text, got {type(text).__name__}")
    found = []
    for tag, body in _packets(dearmor(text)):
        if tag != PUBLIC_KEY or not body:
            continue
        version = body[0]
        if version == 4:
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body, usedforsecurity=False).hexdigest()
        elif version in (5, 6):
            digest = hashlib.sha256(bytes([0x9A if version == 5 else 0x9B]) + len(body).to_bytes(4, "big") + body).hexdigest()
        else:
            raise AnsibleFilterError(f"openpgp_fingerprints: public key version {version} is not supported.")
        found.append(digest.upper())
    if not found:
        raise AnsibleFilterError("openpgp_fingerprints: the key block holds no public key.")
    return found


def openpgp_fingerprint_normalize(fingerprint: str) -> str:
    """A fingerprint as people write it (spaces, 0x, lower case) in the form openpgp_fingerprints returns."""
    return re.sub(r"\s+", "", str(fingerprint)).upper().removeprefix("0X")


class FilterModule:
    def filters(self) -> dict:
        return {"openpgp_fingerprints": openpgp_fingerprints,
                "openpgp_fingerprint_normalize": openpgp_fingerprint_normalize}
