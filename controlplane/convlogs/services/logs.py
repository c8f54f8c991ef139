"""Storing conversation logs: an upload streamed to disk, or a file registered from the import directory.

Either way the bytes are copied into `CONVERSATION_LOG_DIR` under a random name in chunks while hashed, checked (a
gzip stream decompressed to its end under its limit, a recognisable first line), and only then recorded; a refused
or failed store leaves no file and no row.
"""

import gzip
import hashlib
import os
import stat
import uuid
import zlib
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.convlogs.models import ConversationLog
from controlplane.convlogs.reader import GZIP_MAGIC, LogUnreadable, sniff
from controlplane.lib.body_limit import BodyTooLarge
from controlplane.lib.errors import Conflict, Forbidden, InvalidField, check_slug

CHUNK_BYTES = 1024 * 1024


@mutating_service
def conversation_log_create(
    *, actor, name: str, description: str = "", filename: str, chunks: Iterable[bytes]
) -> ConversationLog:
    """Store an uploaded log from its chunks (an UploadedFile's `chunks()`), never holding the whole file."""
    check_slug("name", name)
    _check_free(name)
    return _store(
        actor=actor,
        name=name,
        description=description,
        filename=filename,
        chunks=chunks,
        source=ConversationLog.Source.UPLOAD,
    )


@mutating_service
def conversation_log_import(*, actor, name: str, description: str = "", path: str) -> ConversationLog:
    """Register (copy in) a log already on the control-plane host, from under `CONVERSATION_LOG_IMPORT_DIR` only."""
    check_slug("name", name)
    source = import_path(path)
    _check_free(name)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(source, flags)
    except OSError as exc:
        raise InvalidField("path", f"cannot open {path!r}: {exc.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise InvalidField("path", f"{path!r} is not a regular file")
        chunks = iter(lambda: file.read(CHUNK_BYTES), b"")
        return _store(
            actor=actor,
            name=name,
            description=description,
            filename=source.name,
            chunks=chunks,
            source=ConversationLog.Source.IMPORT,
        )


def import_path(path) -> Path:
    """The real path of a file named relative to (or absolutely inside) the import directory, or InvalidField.

    Refused: importing switched off, `..` components, anything whose real path (symlinks followed) is outside the
    directory."""
    root_setting = settings.CONVERSATION_LOG_IMPORT_DIR
    if not root_setting:
        raise Forbidden("path: importing files from the control-plane host is off (CONVERSATION_LOG_IMPORT_DIR unset)")
    if not isinstance(path, str) or not path.strip():
        raise InvalidField("path", "required: a file under the import directory")
    if "\x00" in path or len(path) > 1024:
        raise InvalidField("path", "must be a file name of at most 1024 characters without NUL")
    if ".." in Path(path).parts:
        raise InvalidField("path", "must not contain '..'")
    root = Path(os.path.realpath(root_setting))
    candidate = Path(path) if os.path.isabs(path) else Path(root_setting) / path
    real = Path(os.path.realpath(candidate))
    if real == root or root not in real.parents:
        raise InvalidField("path", "must name a file inside the import directory (symlinks are followed)")
    if not real.is_file():
        raise InvalidField("path", f"no such file in the import directory: {path!r}")
    return real


def _check_free(name: str) -> None:
    if ConversationLog.objects.filter(name=name).exists():
        raise Conflict(f"name: a conversation log named {name!r} already exists")


def _store(*, actor, name, description, filename, chunks, source) -> ConversationLog:
    directory = Path(settings.CONVERSATION_LOG_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    stored_name = f"{uuid.uuid4().hex}.log"
    target = directory / stored_name
    partial = directory / f".incoming-{stored_name}"
    try:
        size, digest, head = _write(partial, chunks)
        if size == 0:
            raise InvalidField("file", "is empty")
        fmt, compression = sniff(head)
        if compression == "gzip":
            _check_gzip(partial)
        _check_text(partial, compression)
        os.replace(partial, target)
        try:
            with transaction.atomic():
                log = ConversationLog.objects.create(
                    name=name,
                    description=(description or "")[:500],
                    original_filename=Path(str(filename or "")).name[:255] or "log",
                    source=source,
                    format=fmt,
                    compression=compression,
                    size_bytes=size,
                    sha256=digest,
                    stored_name=stored_name,
                    created_by=actor,
                )
                audit_record(
                    actor=actor,
                    action=f"convlog.{source}",
                    target=log,
                    after={"format": fmt, "compression": compression, "size_bytes": size, "sha256": digest},
                    reason=(description or "")[:500],
                )
        except IntegrityError:
            raise Conflict(f"name: a conversation log named {name!r} already exists") from None
        return log
    except BaseException:
        partial.unlink(missing_ok=True)
        target.unlink(missing_ok=True)
        raise


def _write(partial: Path, chunks: Iterable[bytes]) -> tuple[int, str, bytes]:
    """(size, sha256, first bytes) of the chunks, written to `partial`; over the limit stops at once."""
    limit = settings.CONVERSATION_LOG_MAX_BYTES
    digest = hashlib.sha256()
    size = 0
    head = b""
    with open(partial, "xb") as out:
        for chunk in chunks:
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(
                    f"file: {size}+ bytes is over the limit of {limit} bytes ({limit / (1 << 20):g} MiB)", field="file"
                )
            if len(head) < 8192:
                head += chunk[: 8192 - len(head)]
            digest.update(chunk)
            out.write(chunk)
    return size, digest.hexdigest(), head


def _check_gzip(path: Path) -> None:
    """Decompress to the end, counting: a broken stream or one past the decompressed limit refuses the file."""
    limit = settings.CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES
    total = 0
    try:
        with gzip.open(path, "rb") as stream:
            while block := stream.read(CHUNK_BYTES):
                total += len(block)
                if total > limit:
                    raise LogUnreadable(
                        f"file: decompressed, the log is over the limit of {limit} bytes ({limit / (1 << 20):g} MiB)",
                        field="file",
                    )
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidField("file", f"starts like gzip but is not a readable gzip stream ({exc})") from None


def _check_text(path: Path, compression: str) -> None:
    """The first line must be text: a JSON object, or a CSV header (an image or archive is refused here)."""
    opener = gzip.open if compression == "gzip" else open
    with opener(path, "rb") as stream:
        first = stream.readline(64 * 1024).removeprefix(b"\xef\xbb\xbf")
    if first.startswith(GZIP_MAGIC):
        raise InvalidField("file", "is compressed twice; upload the log gzip-compressed at most once")
    try:
        text = first.decode("utf-8").strip()
    except UnicodeDecodeError:
        text = ""
    if not text or not (text.startswith("{") or ("role" in text.lower() and "content" in text.lower())):
        raise InvalidField(
            "file",
            'not a conversation log: the first line must be a JSON object ({"messages": [...]} or a message) '
            "or the CSV header role,content,conversation_id",
        )
