"""Planning an archive: the oldest messages cut into folders of about `target_chars`, with
titles and event time ranges (SPEC 5; source §1.1). Pure: nothing is written here."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.memory.chunking import chunk_text

TITLE_MAX = 24  # code points
MAX_FOLDERS_PER_RUN = 500


class ArchivedMessage(BaseModel):
    model_config = ConfigDict(frozen=True)
    role: Literal["user", "assistant", "tool"]
    text: str
    at_ms: int = Field(ge=0)  # the message's own time: folders' event ranges come from these
    headline: str | None = None  # what a title shows of it, when not its text (e.g. without labels)


class PlannedFolder(BaseModel):
    model_config = ConfigDict(frozen=True)
    seq: int  # 1-based within the run
    title: str
    text: str
    event_from: int
    event_to: int


class TooManyFolders(ValueError):
    """One archive run would make more folders than allowed."""


class _Draft:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.messages: list[tuple[int, ArchivedMessage]] = []  # (index in the run, message)

    @property
    def size(self) -> int:
        return sum(len(part) for part in self.parts)


def render(message: ArchivedMessage) -> str:
    return f"{message.role}: {message.text}\n"


def plan_folders(
    messages: list[ArchivedMessage], target_chars: int = 1200, max_folders: int = MAX_FOLDERS_PER_RUN
) -> list[PlannedFolder]:
    """Folders whose texts, joined, are exactly the rendered messages in order. A message
    longer than the target is split at sentence ends across folders of its own."""
    drafts: list[_Draft] = []
    current = _Draft()
    for index, message in enumerate(messages):
        text = render(message)
        if len(text) > target_chars:
            if current.parts:
                drafts.append(current)
            for piece in chunk_text(text, target_chars):
                draft = _Draft()
                draft.parts.append(piece)
                draft.messages.append((index, message))
                drafts.append(draft)
            current = _Draft()
            continue
        if current.parts and current.size + len(text) > target_chars:
            drafts.append(current)
            current = _Draft()
        current.parts.append(text)
        current.messages.append((index, message))
    if current.parts:
        drafts.append(current)
    if len(drafts) > max_folders:
        raise TooManyFolders(f"the archive would make {len(drafts)} folders; at most {max_folders} per run")
    titles = _unique([_title(draft, messages, seq) for seq, draft in enumerate(drafts, start=1)])
    return [
        PlannedFolder(
            seq=seq,
            title=title,
            text="".join(draft.parts),
            event_from=min(m.at_ms for _, m in draft.messages),
            event_to=max(m.at_ms for _, m in draft.messages),
        )
        for seq, (draft, title) in enumerate(zip(drafts, titles, strict=True), start=1)
    ]


def _clean(text: str) -> str:
    return " ".join(text.split())


def _title(draft: _Draft, messages: list[ArchivedMessage], seq: int) -> str:
    """The first user message of the folder; else the nearest earlier user message of the run
    (a folder that starts mid-turn); else the folder's first message; else 第N段对话."""
    candidates = [_clean(m.headline or m.text) for _, m in draft.messages if m.role == "user"]
    first_index = draft.messages[0][0]
    candidates += [_clean(m.headline or m.text) for m in reversed(messages[:first_index]) if m.role == "user"]
    candidates.append(_clean(draft.messages[0][1].headline or draft.messages[0][1].text))
    title = next((c for c in candidates if c), f"第{seq}段对话")
    return title[:TITLE_MAX]


def _unique(titles: list[str]) -> list[str]:
    """Duplicates within one run get a full-width suffix with their folder number."""
    counts = {t: titles.count(t) for t in titles}
    return [f"{t}（{seq}）" if counts[t] > 1 else t for seq, t in enumerate(titles, start=1)]
