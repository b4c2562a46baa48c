"""Labelled lines of an admitted batch (SPEC 3.6), in the shop's time zone."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from runtime.agent.rendering import RenderableMessage, render_batch


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


def msg(role, name, content_type, body, at):
    return RenderableMessage(sender_role=role, sender_name=name, content_type=content_type, body=body, received_at=at)


def test_labels_and_placeholders_in_shanghai_time():
    lines = render_batch(
        [
            msg("external", "张三", "text", "这个什么时候发货？", ms(2026, 11, 30, 6, 5)),
            msg("human-console", None, "text", "已经帮您催了", ms(2026, 11, 30, 6, 6)),
            msg("external", "张三", "image", '{"ref": "abc"}', ms(2026, 11, 30, 6, 6, 30)),
            msg("human-native", "店长", "text", "我来处理", ms(2026, 11, 30, 15, 59)),
            msg("external", None, "unsupported", '{"platform_type": "voice"}', ms(2026, 11, 30, 16, 0)),
            msg("external", "李四", "markdown", "**加急**", ms(2026, 11, 30, 16, 1)),
        ],
        ZoneInfo("Asia/Shanghai"),
    )
    assert lines.splitlines() == [
        "[2026-11-30 14:05] [counterpart 张三] 这个什么时候发货？",
        "[2026-11-30 14:06] [operator from console] 已经帮您催了",
        "[2026-11-30 14:06] [counterpart 张三] [image]",
        "[2026-11-30 23:59] [operator from native client] 我来处理",
        "[2026-12-01 00:00] [counterpart] [unsupported message type: voice]",
        "[2026-12-01 00:01] [counterpart 李四] **加急**",
    ]
    assert "]:" not in lines  # never a Markdown link reference definition


def test_daylight_saving_zone_uses_the_offset_of_each_instant():
    zone = ZoneInfo("America/New_York")
    before = render_batch([msg("external", "A", "text", "x", ms(2026, 3, 8, 6, 59))], zone)
    after = render_batch([msg("external", "A", "text", "x", ms(2026, 3, 8, 7, 0))], zone)
    assert before.startswith("[2026-03-08 01:59]") and after.startswith("[2026-03-08 03:00]")
