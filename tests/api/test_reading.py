"""The one reader of manifests and scenarios: Unicode by byte-order mark, UTF-8 otherwise, one-line errors
for anything else, and duplicate mapping keys refused as Kubernetes' decoders refuse them."""

from __future__ import annotations

import codecs

import pytest

from kai_ray.api.loader import ManifestError, decode_text, load_documents

TEXT = "metadata:\n  name: caf\u00e9\n"


@pytest.mark.parametrize(
    "data",
    [
        TEXT.encode("utf-8"),
        codecs.BOM_UTF8 + TEXT.encode("utf-8"),
        codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"),
        codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"),
        codecs.BOM_UTF32_LE + TEXT.encode("utf-32-le"),
        codecs.BOM_UTF32_BE + TEXT.encode("utf-32-be"),
    ],
    ids=["utf-8", "utf-8-bom", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"],
)
def test_unicode_with_or_without_a_byte_order_mark_reads_the_same(data: bytes) -> None:
    assert decode_text(data, "f.yaml") == TEXT
    assert list(load_documents(decode_text(data, "f.yaml"), "f.yaml")) == [
        ("f.yaml document 1", {"metadata": {"name": "caf\u00e9"}})
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("a: 1\nb: caf\u00e9\n".encode("latin-1"), "f.yaml: line 2: not UTF-8 text (byte 0xe9 at byte 11)"),
        (b"\x7fELF\x02\x01\x01\x00\x00", "f.yaml: a binary file, not YAML text (a NUL byte at byte 7"),
        ("a: 1".encode("utf-16-le"), "f.yaml: a binary file, not YAML text (a NUL byte at byte 1; UTF-16 text"),
        (codecs.BOM_UTF16_LE + b"a\x00\x00\xd8", "f.yaml: not valid UTF-16-LE text"),
    ],
    ids=["latin-1", "binary", "utf-16-without-bom", "broken-utf-16"],
)
def test_other_bytes_are_one_line_naming_the_file(data: bytes, message: str) -> None:
    with pytest.raises(ManifestError) as err:
        decode_text(data, "f.yaml")
    assert str(err.value).startswith(message) and "\n" not in str(err.value), err.value


def test_duplicate_keys_name_the_key_and_both_lines() -> None:
    text = "metadata:\n  labels:\n    kai.scheduler/queue: training\n    kai.scheduler/queue: serving\n"
    with pytest.raises(
        ManifestError, match=r"^f.yaml: line 4: duplicate key 'kai.scheduler/queue' \(first on line 3\)$"
    ):
        list(load_documents(text, "f.yaml"))
    with pytest.raises(ManifestError, match=r"document 2|line 6: duplicate key 'b'"):
        list(load_documents("a: 1\n---\nb: 1\nc:\n  d: 2\nb: 3\n", "f.yaml"))


def test_two_objects_in_one_document_say_a_separator_is_missing() -> None:
    text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\n"
    with pytest.raises(ManifestError) as err:
        list(load_documents(text, "f.yaml"))
    assert str(err.value) == (
        "f.yaml: line 4: duplicate key 'apiVersion' (first on line 1); two objects in one document: a '---' line "
        "between them is probably missing"
    )


def test_a_merge_key_may_be_overridden_as_yaml_allows() -> None:
    text = "base: &b {cpu: 1, memory: 2}\nworker:\n  <<: *b\n  cpu: 4\n"
    [(_, doc)] = load_documents(text, "f.yaml")
    assert doc["worker"] == {"cpu": 4, "memory": 2}
