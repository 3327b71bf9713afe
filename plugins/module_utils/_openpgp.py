# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters openpgp_fingerprints, openpgp_fingerprint_normalize and openpgp_key of the roles driver and container_toolkit).

Pin a repository's signing key: fingerprints of OpenPGP public keys, and the one verified key as a keyring."""
from __future__ import annotations

import base64
import binascii
import hashlib
import re


class OpenPGPError(ValueError):
    """A key text that is not what it must be, with a message naming it."""


SIGNATURE = 2
PUBLIC_KEY = 6
TRUST = 12
USER_ID = 13
PUBLIC_SUBKEY = 14
USER_ATTRIBUTE = 17
# The packets of a transferable public key (RFC 9580 section 10.1) after its primary key; trust packets are gpg's
# local data and are dropped. Any other packet (a secret key, data, a marker) is refused.
_KEY_PACKETS = (SIGNATURE, USER_ID, PUBLIC_SUBKEY, USER_ATTRIBUTE)
_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
_END = "-----END PGP PUBLIC KEY BLOCK-----"
_BLOCK = re.compile(re.escape(_BEGIN) + r"[ \t]*\r?\n(.*?)" + re.escape(_END), re.S)


def _packets(data: bytes):
    """(tag, header and body bytes, body) of each packet (RFC 9580 section 4.2, old and new formats)."""
    i = 0
    while i < len(data):
        start, first = i, data[i]
        if not first & 0x80:
            raise OpenPGPError(f"not an OpenPGP packet at byte {i}.")
        if first & 0x40:  # new format
            tag, i = first & 0x3F, i + 1
            if i >= len(data):
                raise OpenPGPError("the key block is cut short.")
            o1 = data[i]
            if o1 < 192:
                length, i = o1, i + 1
            elif o1 < 224:
                length, i = ((o1 - 192) << 8) + data[i + 1] + 192 if i + 1 < len(data) else -1, i + 2
            elif o1 == 255:
                length, i = int.from_bytes(data[i + 1:i + 5], "big"), i + 5
            else:
                raise OpenPGPError("partial body lengths are not used in key blocks.")
        else:  # old format
            tag, kind, i = (first >> 2) & 0x0F, first & 0x03, i + 1
            if kind == 3:
                raise OpenPGPError("indeterminate packet lengths are not used in key blocks.")
            size = (1, 2, 4)[kind]
            length, i = int.from_bytes(data[i:i + size], "big"), i + size
        if length < 0 or i + length > len(data):
            raise OpenPGPError("the key block is cut short.")
        yield tag, data[start:i + length], data[i:i + length]
        i += length


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def _decode(body: str) -> bytes:
    """The bytes of one armoured block's body (armour headers, then base64, then an optional =CRC24 line)."""
    lines = body.replace("\r", "").split("\n")
    if lines and re.match(r"^[A-Za-z-]+: ", lines[0]):
        blank = lines.index("") if "" in lines else len(lines)
        lines = lines[blank + 1:]
    lines = [ln.strip() for ln in lines if ln.strip()]
    checksum = lines.pop()[1:] if lines and lines[-1].startswith("=") and len(lines[-1]) == 5 else None
    try:
        data = base64.b64decode("".join(lines), validate=True)
        crc = int.from_bytes(base64.b64decode(checksum, validate=True), "big") if checksum else None
    except (binascii.Error, ValueError) as exc:
        raise OpenPGPError(f"the armoured key is not valid base64 ({exc}).") from None
    if crc is not None and crc != _crc24(data):
        raise OpenPGPError("the armoured key's checksum does not match its data (damaged or altered).")
    return data


def dearmor(text: str) -> bytes:
    """The binary packets of the first ASCII-armoured public key block of text."""
    match = _BLOCK.search(text)
    if not match:
        raise OpenPGPError(f"no '{_BEGIN}' block in the key text.")
    return _decode(match.group(1))


def _fingerprint(body: bytes) -> str:
    version = body[0] if body else 0
    if version == 4:
        digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body, usedforsecurity=False).hexdigest()
    elif version in (5, 6):
        digest = hashlib.sha256(bytes([0x9A if version == 5 else 0x9B]) + len(body).to_bytes(4, "big") + body).hexdigest()
    else:
        raise OpenPGPError(f"public key version {version} is not supported.")
    return digest.upper()


def openpgp_fingerprints(text: str) -> list[str]:
    """Upper-case hex fingerprints of every primary public key in every ASCII-armoured key block of text."""
    if not isinstance(text, str):
        raise OpenPGPError(f"openpgp_fingerprints expects the key's text, got {type(text).__name__}")
    found = []
    try:
        blocks = [_decode(m.group(1)) for m in _BLOCK.finditer(text)]
        if not blocks:
            raise OpenPGPError(f"no '{_BEGIN}' block in the key text.")
        for data in blocks:
            found += [_fingerprint(body) for tag, _raw, body in _packets(data) if tag == PUBLIC_KEY]
    except OpenPGPError as exc:
        raise OpenPGPError(f"openpgp_fingerprints: {exc}") from None
    if not found:
        raise OpenPGPError("openpgp_fingerprints: the key block holds no public key.")
    return found


def openpgp_fingerprint_normalize(fingerprint: str) -> str:
    """A fingerprint as people write it (spaces, 0x, lower case) in the form openpgp_fingerprints returns."""
    return re.sub(r"\s+", "", str(fingerprint)).upper().removeprefix("0X")


def _armor(data: bytes) -> str:
    b64 = base64.b64encode(data).decode()
    lines = [b64[i:i + 64] for i in range(0, len(b64), 64)]
    crc = base64.b64encode(_crc24(data).to_bytes(3, "big")).decode()
    return "\n".join([_BEGIN, "", *lines, "=" + crc, _END]) + "\n"


def openpgp_key(text: str, fingerprint: str = "", what: str = "the key") -> str:
    """The one public key of text, verified and armoured again from its own packets only.

    text must be exactly one armoured public key block (white space around it only) holding exactly one primary
    public key, with its user ids, signatures and subkeys; with a fingerprint, the key's must be that one. Anything
    else fails naming what (the host and where the key came from): trailing or leading data, a second block, a
    second primary key, another key, a damaged block. The result holds only the packets of that key (armour
    headers and gpg's trust packets dropped), so the keyring written is the key that was checked.
    """
    if not isinstance(text, str):
        raise OpenPGPError(f"{what}: expected the key's text, got {type(text).__name__}.")
    want = openpgp_fingerprint_normalize(fingerprint) if fingerprint else ""
    if want and not re.fullmatch(r"[0-9A-F]{40}|[0-9A-F]{64}", want):
        raise OpenPGPError(
            f"{what}: the pinned fingerprint {fingerprint!r} is not an OpenPGP fingerprint (40 hex digits for a v4 key, "
            "64 for v6).")
    blocks = list(_BLOCK.finditer(text))
    if len(blocks) != 1:
        raise OpenPGPError(
            f"{what}: expected exactly one '{_BEGIN}' block, found {len(blocks)}. Nothing was written.")
    outside = (text[:blocks[0].start()] + text[blocks[0].end():]).strip()
    if outside:
        raise OpenPGPError(
            f"{what}: there is other data before or after the key block ({len(outside)} characters). "
            "Nothing was written.")
    try:
        packets = list(_packets(_decode(blocks[0].group(1))))
    except OpenPGPError as exc:
        raise OpenPGPError(f"{what}: {exc} Nothing was written.") from None
    primaries = [_fingerprint(body) for tag, _raw, body in packets if tag == PUBLIC_KEY]
    if not packets or packets[0][0] != PUBLIC_KEY or len(primaries) != 1:
        raise OpenPGPError(
            f"{what}: expected exactly one primary public key, found {len(primaries)} "
            f"({', '.join(primaries) or 'none'}). Nothing was written.")
    other = sorted({tag for tag, _raw, _body in packets[1:] if tag not in _KEY_PACKETS + (TRUST,)})
    if other:
        raise OpenPGPError(
            f"{what}: the key block holds packets that are not part of a public key (tags {other}). "
            "Nothing was written.")
    if want and primaries[0] != want:
        raise OpenPGPError(
            f"{what} has the fingerprint(s) {primaries[0]}, not {want}, the pinned one. Nothing was written. Check "
            "where the key comes from, or pin the fingerprint its publisher gives for it.")
    return _armor(b"".join(raw for tag, raw, _body in packets if tag != TRUST))
