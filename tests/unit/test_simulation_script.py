"""Simulation scripts and the simulator's richer buyers: the script clock, scripts read from TOML
and YAML (and refused whole with the field named), group conversations with mention evidence,
and buyer photos paged as the platform's media."""

from __future__ import annotations

from pathlib import Path

import pytest

from transports.simulator import SimulatedPlatform, SimulatorTransport
from transports.simulator.platform import BuyerMedia
from transports.simulator.script import ScriptClock, ScriptInvalid, load_script
from transports.simulator.transport import media_ref, message_ids
from worker.demo import PHOTO

TUESDAY_9 = 1_772_499_600_000  # 2026-03-03T09:00:00+08:00


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_script_clock_runs_with_real_time_and_only_jumps_forward() -> None:
    ticks = FakeTime()
    clock = ScriptClock(TUESDAY_9, ticks)
    ticks.now += 1.5
    assert clock.now_ms() == TUESDAY_9 + 1500
    friday = TUESDAY_9 + 3 * 86_400_000
    assert clock.advance(friday) == friday
    ticks.now += 2
    assert clock.now_ms() == friday + 2000
    assert clock.advance(TUESDAY_9) == friday + 2000  # an earlier group time: the clock runs on
    for bad in (1_772_499_600, True, 10**13):
        with pytest.raises(ValueError, match="13-digit"):
            ScriptClock(bad)  # type: ignore[arg-type]


def write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / "photo.png").write_bytes(PHOTO)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_script_reads_from_toml_and_yaml_alike(tmp_path: Path) -> None:
    toml = write(
        tmp_path,
        "s.toml",
        """
start = "2026-03-03T09:00:00+08:00"
[[conversations]]
name = "photo"
buyer = { id = "b1", name = "张三" }
steps = [{ say = "破了", image = "photo.png", expect = { contains = "补发" } }, { at = 1772845200000, say = "好" }]
""",
    )
    yaml = write(
        tmp_path,
        "s.yaml",
        """
start: 1772499600000
conversations:
  - name: photo
    buyer: {id: b1, name: 张三}
    steps:
      - {say: 破了, image: photo.png, expect: {contains: 补发}}
      - {at: "2026-03-07T09:00:00+08:00", say: 好}
""",
    )
    scripts = [load_script(toml), load_script(yaml)]
    assert scripts[0].model_dump(exclude={"folder"}) == scripts[1].model_dump(exclude={"folder"})
    script = scripts[0]
    assert script.start == TUESDAY_9 and script.conversations[0].steps[1].at == TUESDAY_9 + 4 * 86_400_000
    media = script.media(script.conversations[0].steps[0])
    assert media is not None and media.kind == "image" and media.data == PHOTO


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('[[conversations]]\nname = "x"\nbuyer = { id = "b1", name = "a" }\nsteps = []\n', "conversations.0.steps"),
        ('[[conversations]]\nname = "x"\nbuyer = { id = "b1", name = "a" }\nsteps = [{ say = "x", mention = true }]\n',
         "mention is for group conversations"),
        ('[[conversations]]\nname = "x"\nbuyer = { id = "b1", name = "a" }\nsteps = [{ say = "x", wait = false,'
         ' expect = { reply = true } }]\n', "does not wait"),
        ('[[conversations]]\nname = "x"\nbuyer = { id = "b1", name = "a" }\nsteps = [{ image = "missing.png" }]\n',
         "missing.png"),
        ('[[conversations]]\nname = "x"\nbuyer = { id = "b1", name = "a" }\nsteps = [{ image = "s.toml" }]\n',
         "not a PNG"),
        ('start = "2026-03-03T09:00:00"\n[[conversations]]\nname = "x"\nbuyer = { id = "b1", name = "a" }\n'
         'steps = [{ say = "x" }]\n', "start"),
        ('[[conversations]]\nname = "x"\nbuyer = { id = "b1", name = "a" }\nsteps = [{ say = "x" }]\n'
         '[[conversations]]\nname = "y"\nbuyer = { id = "b1", name = "a" }\nsteps = [{ say = "y" }]\n',
         "buyer b1 is in an earlier conversation"),
        ("conversations = [ broken", "s.toml"),
    ],
)  # fmt: skip
def test_a_bad_script_is_refused_whole_naming_the_problem(tmp_path: Path, body: str, named: str) -> None:
    with pytest.raises(ScriptInvalid, match="KEFU_SIMULATION_SCRIPT_INVALID") as refused:
        load_script(write(tmp_path, "s.toml", body))
    assert named in str(refused.value)


def test_a_group_message_carries_its_mention_and_a_photo_is_paged_as_platform_media(tmp_path: Path) -> None:
    platform = SimulatedPlatform(tmp_path / "platform.sqlite")
    transport = SimulatorTransport(platform)
    chat = platform.buyer_says("shop", "b4", "赵六", "有现货吗", group="g1", group_title="团购群")
    ask = platform.buyer_says("shop", "b4", "赵六", "@店铺 有优惠吗", group="g1", group_title="团购群", mention=True)
    photo = BuyerMedia(kind="image", name="photo.png", data=PHOTO)
    shown = platform.buyer_says("shop", "b3", "王五", "破了", media=photo, at_ms=TUESDAY_9)
    [direct, group] = sorted(transport.page_of("shop", [chat, ask, shown]).groups, key=lambda g: g.conversation_id)
    assert (group.conversation_id, group.conversation_type, group.title) == ("sim-group-g1", "group", "团购群")
    assert [m.mention for m in group.messages] == [False, True]
    assert all(m.direct_peer_id is None for m in group.messages)
    image, caption = direct.messages
    assert image.content.type == "image" and image.content.ref == media_ref(shown.seq)
    assert caption.content.type == "text" and caption.content.text == "破了"
    assert [image.platform_message_id, caption.platform_message_id] == message_ids(shown)
    assert int(image.occurred_at.timestamp() * 1000) == TUESDAY_9  # the script's time, not now
    assert platform.media_of(shown.seq) == photo and platform.media_of(chat.seq) is None


def test_the_listener_pages_buyers_then_the_platforms_echoes_then_read_receipts(tmp_path: Path) -> None:
    from runtime.ports import BuyerReadReceipt, Heartbeat, Received

    platform = SimulatedPlatform(tmp_path / "platform.sqlite")
    asked = platform.buyer_says("shop", "b1", "张三", "什么时候发货？")
    sent = platform.receive_send("shop", asked.conversation_id, "b1", "48小时内发货", "req-1")
    group = platform.buyer_says("shop", "b2", "李四", "@店铺 在吗", group="g1", mention=True)
    to_group = platform.receive_send("shop", group.conversation_id, None, "在的", "req-2")
    assert platform.buyer_reads(asked.conversation_id) == 1 and platform.buyer_reads(asked.conversation_id) == 0
    connection = SimulatorTransport(platform, echoes=True).connect("shop", None)
    items = [connection.receive(0.01) for _ in range(4)]
    assert all(isinstance(item, Received) for item in items) and isinstance(connection.receive(0.01), Heartbeat)
    page, echo, group_echo, receipt = (item.item for item in items if isinstance(item, Received))
    assert page.message_count == 2  # both buyers' messages, one page
    assert echo.groups[0].messages[0].outbound_ref == "req-1" and echo.stream_id == "simulator-echo"
    assert (
        group_echo.groups[0].conversation_type == "group" and group_echo.groups[0].messages[0].outbound_ref == "req-2"
    )
    assert isinstance(receipt, BuyerReadReceipt) and receipt.platform_message_id == sent.platform_message_id
    assert receipt.reader_id == "b1" and to_group.platform_message_id not in str(receipt)
    quiet = SimulatorTransport(platform).connect("shop", page.cursor)  # echoes off: only the receipt
    assert isinstance(first := quiet.receive(0.01), Received) and isinstance(first.item, BuyerReadReceipt)


def test_a_simulation_never_touches_a_real_account_and_groups_report_no_reads(store, tmp_path: Path) -> None:
    from runtime.accounts.registry import AccountSpec, create_account
    from runtime.admission.routes import list_routes
    from runtime.errors import KefuError
    from worker.simulation import ensure_sample_shop

    create_account(store, AccountSpec(id="ding", platform="dingtalk", identity="robot-1"))
    with pytest.raises(KefuError, match="KEFU_SIMULATION_REAL_ACCOUNT"):
        ensure_sample_shop(store, "ding")
    assert [r.account_id for r in list_routes(store)] == []  # nothing added to the real shop
    ensure_sample_shop(store)
    ensure_sample_shop(store)  # again: the same account and routes
    assert sorted(r.id for r in list_routes(store)) == ["sim-shop-direct", "sim-shop-groups"]

    platform = SimulatedPlatform(tmp_path / "platform.sqlite")
    asked = platform.buyer_says("shop", "b2", "李四", "@店铺 在吗", group="g1", mention=True)
    platform.receive_send("shop", asked.conversation_id, None, "在的", "req-1")
    assert platform.buyer_reads(asked.conversation_id) == 0


def test_an_empty_persona_is_refused_rather_than_making_a_manual_instance(store, tmp_path: Path) -> None:
    from worker.sample_shop import SAMPLE_ROUTE
    from worker.simulation_instances import SimulationError, new_instance

    platform = SimulatedPlatform(tmp_path / "platform.sqlite")
    with pytest.raises(SimulationError, match="KEFU_SIMULATION_INVALID"):
        new_instance(store, platform, SAMPLE_ROUTE, "小美", " \n")
    assert platform.instances() == []
    assert new_instance(store, platform, SAMPLE_ROUTE, "小美").kind == "manual"
