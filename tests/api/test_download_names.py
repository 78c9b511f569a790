"""Issue 21 (L2): download filenames lose bidi and other format (Cf) and control characters.

A name like ``invoice\\u202egpj.exe`` displays as ``invoiceexe.jpg`` in a browser's
download bar (extension spoofing): Content-Disposition must not carry U+202E,
the other bidi controls (U+200E/F, U+202A-E, U+2066-9, U+061C), zero-width
format characters (the stores already refuse C0/C1 controls in names).
The stored name is unchanged.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from django.urls import reverse

from agent_persistence.ids import uuid7
from agent_persistence.stores import artifact_store, conversation_store, file_store, run_store

pytestmark = pytest.mark.django_db

HOSTILE = [
    ("invoice\u202egpj.exe", "invoicegpj.exe"),
    ("\u2067report\u2069.pdf\u200f", "report.pdf"),
    ("a\u200bb\u2060c\ufeff\u061c.txt", "abc.txt"),
    ("r\u00e9sum\u00e9\u202d.txt", "r\u00e9sum\u00e9.txt"),
    ("soft\u00adhyphen\u206a.txt", "softhyphen.txt"),
]
BAD = {chr(c) for c in [0x200E, 0x200F, 0x061C, 0x200B, 0x2060, 0xFEFF, 0xAD, *range(0x202A, 0x202F),
                        *range(0x2066, 0x206A)]}


def disposition_name(header: str) -> str:
    """The filename a browser takes from Content-Disposition (filename* first)."""
    if "filename*=utf-8''" in header:
        return unquote(header.split("filename*=utf-8''", 1)[1].split(";", 1)[0])
    return header.split('filename="', 1)[1].rsplit('"', 1)[0]


def drain(response: Any) -> None:
    if response.streaming:
        b"".join(response.streaming_content)


@pytest.mark.parametrize(("name", "shown"), HOSTILE)
def test_file_download_names_drop_format_and_control_characters(alice_client: Any, alice_scope: Any, name: str,
                                                                shown: str) -> None:
    conversation = conversation_store().create(alice_scope, agent="echo")
    record = file_store().save(alice_scope, conversation_id=conversation.pk, content=b"x", name=name,
                               content_type="application/octet-stream")
    response = alice_client.get(reverse("agent_persistence:file-content", args=[record.pk]))
    drain(response)
    assert response.status_code == 200
    header = response["Content-Disposition"]
    assert disposition_name(header) == shown and not BAD & set(unquote(header)), header
    assert alice_client.get(reverse("agent_persistence:file-detail", args=[record.pk])).json()["name"] == name


@pytest.mark.parametrize(("name", "shown"), HOSTILE)
def test_artifact_download_names_drop_format_and_control_characters(alice_client: Any, alice_scope: Any, name: str,
                                                                    shown: str) -> None:
    conversation = conversation_store().create(alice_scope, agent="echo")
    run = run_store().create_or_resume(alice_scope, conversation.pk, id=uuid7(), message_id=uuid7())
    artifact = artifact_store().save(alice_scope, run_id=run.pk, content=b"x", media_type="image/png", name=name)
    response = alice_client.get(reverse("agent_persistence:artifact-content", args=[artifact.pk]))
    drain(response)
    assert response.status_code == 200
    header = response["Content-Disposition"]
    assert disposition_name(header) == shown and not BAD & set(unquote(header)), header


def test_a_name_of_only_format_characters_falls_back(alice_client: Any, alice_scope: Any) -> None:
    conversation = conversation_store().create(alice_scope, agent="echo")
    record = file_store().save(alice_scope, conversation_id=conversation.pk, content=b"x", name="\u202e\u200b",
                               content_type="text/plain")
    response = alice_client.get(reverse("agent_persistence:file-content", args=[record.pk]))
    drain(response)
    assert disposition_name(response["Content-Disposition"]) == str(record.pk)
