"""What DingTalk's robot media upload accepts, and how a file the agent made is turned into that.

``POST /media/upload`` (oapi host) takes a ``type`` and checks the file against it (DingTalk's "upload
media files" page):

====== ======== ====================================================
type   max size extensions
====== ======== ====================================================
image  20 MB    jpg, gif, png, bmp
voice  2 MB     amr, mp3, wav
video  20 MB    mp4
file   20 MB    doc, docx, xls, xlsx, ppt, pptx, zip, pdf, rar
====== ======== ====================================================

Anything else (.csv, .txt, .json, .py, .md, …) is refused under every type (errcode 40004/40005/40006).
What we send:

* a picture in an image format goes as ``image`` and is shown as a picture (``sampleImageMsg``, whose
  ``photoURL`` takes the media id); ``.jpeg`` is uploaded named ``.jpg`` (same format, the listed name);
* a document in a listed file format goes as ``file`` (``sampleFile``);
* everything else is **zipped** (``name.ext.zip``, the original inside under its own name) and goes as
  ``file``. Zip is on the file list, keeps the file byte for byte and opens everywhere; the alternatives
  lose something: pasting text into a markdown message drops binary files and hits the ~5,000-character
  message limit, and renaming the extension (report.csv → report.doc) sends a file that opens wrongly.
  Voice and video are zipped too: their own message types (``sampleAudio``, ``sampleVideo``) need the
  duration, and a video also a cover picture, which we could only get by decoding the media.
* a file still over 20 MB after that is not sent (the reply lists it by name).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass

from channels.errors import FileTooLarge

MB = 1024 * 1024
#: Upload type → (largest size, accepted extensions), from DingTalk's media upload documentation.
UPLOAD_RULES: dict[str, tuple[int, frozenset[str]]] = {
    "image": (20 * MB, frozenset({"jpg", "gif", "png", "bmp"})),
    "voice": (2 * MB, frozenset({"amr", "mp3", "wav"})),
    "video": (20 * MB, frozenset({"mp4"})),
    "file": (20 * MB, frozenset({"doc", "docx", "xls", "xlsx", "ppt", "pptx", "zip", "pdf", "rar"})),
}
#: Extensions that are a listed format under another name.
ALIASES = {"jpeg": "jpg"}


@dataclass(frozen=True, slots=True)
class Upload:
    """One file as it will be uploaded: its name on DingTalk, its bytes and the upload ``type``."""

    name: str
    data: bytes
    media_type: str  # "image" | "file"
    zipped: bool = False

    @property
    def extension(self) -> str:
        return extension(self.name)


def extension(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""


def _fits(media_type: str, ext: str, size: int) -> bool:
    limit, extensions = UPLOAD_RULES[media_type]
    return ext in extensions and 0 < size <= limit


def zipped(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


def prepare(name: str, data: bytes) -> Upload:
    """The upload DingTalk accepts for this file (see the module doc); FileTooLarge when none fits.

    CPU-bound for big files (it may compress): call it in a worker thread.
    """
    ext = extension(name)
    listed = ALIASES.get(ext, ext)
    shown = name if listed == ext else f"{name[: -len(ext)]}{listed}"
    if _fits("image", listed, len(data)):
        return Upload(shown, data, "image")
    if _fits("file", listed, len(data)):
        return Upload(shown, data, "file")
    packed = zipped(name, data)
    if _fits("file", "zip", len(packed)):
        return Upload(f"{name}.zip", packed, "file", zipped=True)
    raise FileTooLarge(name, len(packed), UPLOAD_RULES["file"][0])
