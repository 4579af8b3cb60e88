"""Which upload a file the agent made becomes (``channels.dingtalk.media.prepare``): DingTalk's upload takes
only listed extensions per type, so the choice decides whether the user gets the file at all."""

from __future__ import annotations

import io
import os
import zipfile

import pytest

from channels.dingtalk.media import prepare
from channels.errors import FileTooLarge

MB = 1024 * 1024


@pytest.mark.parametrize(
    ("name", "sent_as", "media_type"),
    [
        ("chart.png", "chart.png", "image"),
        ("photo.jpeg", "photo.jpg", "image"),  # the same format under the listed name
        ("Scan.BMP", "Scan.BMP", "image"),
        ("report.pdf", "report.pdf", "file"),
        ("deck.pptx", "deck.pptx", "file"),
        ("table.csv", "table.csv.zip", "file"),
        ("notes.txt", "notes.txt.zip", "file"),
        ("song.mp3", "song.mp3.zip", "file"),  # sampleAudio would need the duration
        ("clip.mp4", "clip.mp4.zip", "file"),  # sampleVideo would need a duration and a cover
        ("Makefile", "Makefile.zip", "file"),
    ],
)
def test_each_file_goes_as_an_upload_dingtalk_accepts(name, sent_as, media_type):
    upload = prepare(name, b"content of " + name.encode())
    assert (upload.name, upload.media_type) == (sent_as, media_type)
    if upload.zipped:
        with zipfile.ZipFile(io.BytesIO(upload.data)) as archive:
            assert archive.read(name) == b"content of " + name.encode()


def test_a_big_picture_that_zips_small_still_arrives_and_one_that_does_not_is_refused():
    assert prepare("flat.png", bytes(21 * MB)).name == "flat.png.zip"  # over the image limit; zeros zip tiny
    with pytest.raises(FileTooLarge):
        prepare("noise.png", os.urandom(21 * MB))
