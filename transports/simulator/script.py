"""Simulation scripts: scripted buyers to try the agent on before real buyers meet it (seed 001,
批量模拟与剧本时间), read from TOML or YAML.

A script lists conversations; each is a buyer (in a direct conversation, or in a group where a
step may mention the shop) and steps: what the buyer says, an image or file it sends, the time
it says it (`at`, to jump to "Friday 18:00"), and what the replies to it must or must not hold.
Each conversation runs on its own script clock, the one source of its messages' times.

    start = "2026-03-03T09:00:00+08:00"
    [[conversations]]
    name = "shipping"
    buyer = { id = "b1", name = "张三" }
    steps = [
      { say = "今天下单什么时候发货？", expect = { contains = "发货" } },
      { at = "2026-03-06T18:00:00+08:00", say = "收到的枕套破了", image = "photo.png" },
    ]
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from runtime.errors import KefuError, validation_problems
from runtime.outbox.media import sniff
from transports.simulator.platform import BuyerMedia

MAX_MEDIA_BYTES = 10 * 1024 * 1024


_aware_time = TypeAdapter(AwareDatetime)


def _epoch_ms(value: object) -> object:
    """A time as 13-digit Unix milliseconds, or as an ISO time with its zone."""
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        return int(value)
    return int(_aware_time.validate_python(value).timestamp() * 1000)


EpochMs = Annotated[int, BeforeValidator(_epoch_ms), Field(ge=10**12, lt=10**13)]


class ScriptClock:
    """The script's time (seed 001 ImScriptClock): starts at a 13-digit millisecond time and
    runs with real time; `advance(at)` jumps to a later time and runs on from there, and an
    earlier `at` leaves the clock running where it is."""

    def __init__(self, initial_at: int, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._at = _checked(initial_at)
        self._monotonic = monotonic
        self._anchor = monotonic()

    def now_ms(self) -> int:
        return self._at + int((self._monotonic() - self._anchor) * 1000)

    def advance(self, at: int) -> int:
        if _checked(at) > self.now_ms():
            self._at, self._anchor = at, self._monotonic()
        return self.now_ms()


def _checked(at: int) -> int:
    if type(at) is not int or not 10**12 <= at < 10**13:
        raise ValueError(f"a script time is 13-digit Unix milliseconds, not {at!r}")
    return at


class Expect(BaseModel):
    """What the replies to one step must hold. An unset field is not checked."""

    model_config = ConfigDict(extra="forbid")
    contains: Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)] = []
    not_contains: Annotated[list[str], BeforeValidator(lambda v: [v] if isinstance(v, str) else v)] = []
    reply: bool | None = None  # a reply to this step at all (false: e.g. a group message not mentioning the shop)
    handoff: bool | None = None  # the agent asked for a human by the end of this step


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    say: str = Field("", max_length=4000)
    image: Path | None = None  # relative to the script's file
    file: Path | None = None
    mention: bool = False  # in a group: the buyer mentions the shop
    at: EpochMs | None = None  # the script time of this step (a later time advances the clock)
    wait: bool = True  # false: the next step follows at once (a buyer typing on), its replies go to the next
    read: bool = False  # first the buyer reads every reply so far (the platform's read receipts)
    expect: Expect = Expect()

    @model_validator(mode="after")
    def _says_something(self) -> Step:
        if not self.say and self.image is None and self.file is None:
            raise ValueError("a step needs say, image or file")
        if self.image is not None and self.file is not None:
            raise ValueError("a step sends an image or a file, not both")
        if not self.wait and self.expect != Expect():
            raise ValueError("a step that does not wait has no replies of its own: expect them on the next step")
        return self


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    name: str = Field(min_length=1, max_length=64)


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    title: str = Field(min_length=1, max_length=128)


class ScriptedConversation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=128)
    buyer: Person
    group: Group | None = None
    start: EpochMs | None = None  # else the script's start
    steps: list[Step] = Field(min_length=1, max_length=500)

    @model_validator(mode="after")
    def _mentions_in_groups(self) -> ScriptedConversation:
        if self.group is None and any(step.mention for step in self.steps):
            raise ValueError("mention is for group conversations (give the conversation a group)")
        return self


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    start: EpochMs = Field(default_factory=lambda: int(time.time() * 1000))
    conversations: list[ScriptedConversation] = Field(min_length=1, max_length=10_000)
    folder: Path = Path(".")  # where relative media paths start (the script file's folder)

    @model_validator(mode="after")
    def _one_buyer_per_direct_conversation(self) -> Script:
        seen: set[str] = set()
        for n, conversation in enumerate(self.conversations):
            key = f"group {conversation.group.id}" if conversation.group else f"buyer {conversation.buyer.id}"
            if key in seen:
                raise ValueError(f"conversations.{n}: {key} is in an earlier conversation (each runs on its own)")
            seen.add(key)
        return self

    def media(self, step: Step) -> BuyerMedia | None:
        """The step's image or file, read and checked (an image must be one)."""
        path = step.image or step.file
        if path is None:
            return None
        data = (self.folder / path).read_bytes()
        if not data or len(data) > MAX_MEDIA_BYTES:
            raise ScriptInvalid(f"{path}: {len(data)} bytes (1 to {MAX_MEDIA_BYTES} allowed)")
        if step.image is not None and sniff(data[:32]) is None:
            raise ScriptInvalid(f"{path}: not a PNG, JPEG, GIF or WebP image")
        return BuyerMedia(kind="image" if step.image is not None else "file", name=path.name, data=data)


class ScriptInvalid(KefuError):
    def __init__(self, detail: str) -> None:
        super().__init__("KEFU_SIMULATION_SCRIPT_INVALID", detail, "fix the script and run it again")


def load_script(path: Path) -> Script:
    """A script from a .toml, .yaml or .yml file, validated whole (media files included) before
    anything is said, so a bad script starts nothing."""
    if path.suffix not in (".toml", ".yaml", ".yml"):
        raise ScriptInvalid(f"{path}: a script is a .toml, .yaml or .yml file")
    try:
        text = path.read_text(encoding="utf-8")
        raw: Any = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
        script = Script.model_validate(
            {**(raw if isinstance(raw, dict) else {"conversations": raw}), "folder": path.parent}
        )
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, yaml.YAMLError) as error:
        raise ScriptInvalid(f"{path}: {error}") from None
    except ValidationError as error:
        raise ScriptInvalid(_every(path, validation_problems(error, "script"))) from None
    problems: list[str] = []
    for n, conversation in enumerate(script.conversations):
        for m, step in enumerate(conversation.steps):
            try:
                script.media(step)
            except (OSError, ScriptInvalid) as error:
                detail = error.message if isinstance(error, ScriptInvalid) else str(error)
                problems.append(f"conversations.{n}.steps.{m}: {detail}")
    if problems:
        raise ScriptInvalid(_every(path, problems))
    return script


def _every(path: Path, problems: list[str]) -> str:
    """Every problem of a script at once, so one edit fixes them all (never a value: a value
    may be a buyer's words). English, like every KefuError message: counted in English."""
    count = "1 problem" if len(problems) == 1 else f"{len(problems)} problems"
    return f"{path}: {count}: " + "; ".join(problems)
