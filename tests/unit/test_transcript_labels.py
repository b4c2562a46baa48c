"""The transcript as operators read it (issue 41's papercuts): who wrote each line, in the
operator's language (Chinese by default), the console and the command line told apart; the
agent's notes without the send-only noise, its secondary words folded yet kept (SPEC 3.7);
which clock the times are on. The model's own labels never change."""

from __future__ import annotations

import time
from datetime import datetime

from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.batches import evaluate
from runtime.admission.routes import RouteSpec, create_route
from runtime.agent.rendering import label
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.turn import run_turn
from runtime.customers.transcript import SessionBegan, TranscriptLine, agent_notes, transcript
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage, Sender, TextContent, platform_time
from runtime.outbox.manual import ManualSend, send_manual
from runtime.store.states import RotationReason, SessionOrigin
from runtime.store.tables import SessionHeader
from worker.cli.common import console, print_table, shop_zone
from worker.i18n import translations
from worker.transcript_words import said, who


def say(store, transport, platform, text: str, at_ms: int | None = None) -> int:
    said = platform.buyer_says("shop", "b1", "张三", text, at_ms=at_ms)
    return ingest_page(store, transport.page_of("shop", [said])).customer_ids[0]


def answer(store, settings, customer: int) -> None:
    evaluate(store, customer, 1000)
    run_turn(store, RulesProvider(load_knowledge(None)), customer, settings.sessions_dir, settings.zone, settings.agent)


ZH, EN = translations("zh_CN", "cli").gettext, translations("en", "cli").gettext


def line(speaker, author=None, via=None, **fields) -> TranscriptLine:
    return TranscriptLine(key="k", at=0, shown_at=0, speaker=speaker, author=author, via=via, text="", **fields)


def test_each_sender_reads_in_the_operators_language_and_the_console_and_command_line_are_told_apart():
    assert who(line("buyer", "张三"), ZH) == "买家 张三" and who(line("buyer", "张三"), EN) == "buyer 张三"
    assert who(line("buyer"), ZH) == "买家"
    assert who(line("native-operator", "小王", "wangwang"), ZH) == "客服 小王（千牛客户端）"
    assert who(line("native-operator", "小王", "wangwang"), EN) == "operator 小王 (Qianniu client)"
    assert who(line("native-operator", None, "dingtalk"), ZH) == "客服（钉钉客户端）"
    assert who(line("native-operator", None, "platform"), ZH) == "客服（平台客户端）"  # an account gone from the store
    assert who(line("operator-dm", "alice"), ZH) == "客服 → 智能客服"
    assert who(line("assistant"), ZH) == "智能客服" and who(line("assistant"), EN) == "agent"
    assert who(line("console-operator", "alice", "console"), ZH) == "客服 alice（控制台）"
    assert who(line("console-operator", "alice", "console"), EN) == "operator alice (console)"
    assert who(line("console-operator", "bob", "cli"), ZH) == "客服 bob（命令行）"
    assert who(line("console-operator", None, "cli"), ZH) == "客服（命令行）"  # an older kefu's `kefu send`
    began = SessionBegan(session_id="s2-1", parent="s1-1", forked=False, reason=RotationReason.INACTIVITY)
    assert said(line("agent-note", began=began), ZH) == "[智能客服开始新会话 s2-1：接续 s1-1，长时间没有对话]"
    assert said(line("agent-note", began=began), EN) == (
        "[new agent session s2-1: continues s1-1, no conversation for a long time]"
    )
    assert said(line("agent-note", unreadable="CorruptSessionLog"), ZH) == "[会话记录无法读取：CorruptSessionLog]"
    # What the model reads is its own and unchanged (runtime.agent.rendering).
    assert label("external", "张三") == "[counterpart 张三]"
    assert label("human-console", None) == "[operator from console]"


def test_the_transcript_labels_a_console_send_a_command_line_send_and_the_buyer(store, shop, transport, platform):
    customer = say(store, transport, platform, "在吗")
    send_manual(store, ManualSend(request_id="op-1", customer_id=customer, text="在的", operator="alice"))
    send_manual(store, ManualSend(request_id="op-2", customer_id=customer, text="稍等", operator="cli:bob"))
    shown = [(line.speaker, line.author, line.via) for line in transcript(store, customer).lines]
    assert shown == [
        ("buyer", "张三", None),
        ("console-operator", "alice", "console"),
        ("console-operator", "bob", "cli"),
    ]


def test_a_native_operators_line_names_the_platforms_own_client_and_real_time_is_not_script_time(store, shop):
    create_account(store, AccountSpec(id="ww", platform="wangwang", identity="seller-ww"))
    create_route(store, RouteSpec(id="ww-direct", account_id="ww", conversation_type="direct"), op_id="op-ww")
    now = time.time() * 1000

    def message(n: int, sender: Sender, text: str) -> InboundMessage:
        at = platform_time(now + n, "occurred_at")
        return InboundMessage(
            platform_message_id=f"m{n}", sender=sender, content=TextContent(text=text), occurred_at=at
        )

    group = ConversationGroup(
        conversation_id="ww-c1",
        conversation_type="direct",
        messages=[
            message(1, Sender(id="buyer-1", display_name="张三", role="buyer"), "在吗"),
            message(2, Sender(id="staff-1", display_name="小王", role="native_operator"), "在的，您说"),
        ],
    )
    page = InboundPage(account_id="ww", stream_id="s", cursor="2", page_op_id="ww-p1", groups=[group])
    [customer] = set(ingest_page(store, page).customer_ids)
    page = transcript(store, customer)
    assert [(line.speaker, line.author, line.via) for line in page.lines] == [
        ("buyer", "张三", None),
        ("native-operator", "小王", "wangwang"),
    ]
    assert not page.script_time and not any(line.script_time for line in page.lines)  # the shop's own clock


def test_a_reply_is_one_line_and_the_agents_closing_words_are_kept_but_folded(
    store, settings, shop, transport, platform
):
    tuesday = int(datetime.fromisoformat("2026-03-03T09:00:00+08:00").timestamp() * 1000)
    customer = say(store, transport, platform, "什么时候发货？", at_ms=tuesday)
    answer(store, settings, customer)
    page = transcript(store, customer, sessions_dir=settings.sessions_dir)
    shown = [(line.speaker, line.folded) for line in page.lines]
    assert shown == [
        ("buyer", False),
        ("assistant", False),
        ("agent-note", True),  # "已回复顾客。": there to open, not in the way
    ]
    assert not any("im_send_message" in line.text for line in page.lines)
    # A simulation on its script's clock: the page says its times are script time.
    assert page.script_time and all(line.script_time for line in page.lines)
    assert page.lines[0].shown_at == tuesday


def test_a_handoff_with_nothing_sent_stays_in_view(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "这个东西能吃吗")  # nothing in the FAQ: the rules hand off
    answer(store, settings, customer)
    page = transcript(store, customer, sessions_dir=settings.sessions_dir)
    [note] = [line for line in page.lines if line.calls]
    assert (note.speaker, note.calls, note.folded) == ("agent-note", ["im_handoff"], False)
    assert said(note, ZH) == "无匹配答案，转人工。 [调用 im_handoff]"
    assert said(note, EN) == "无匹配答案，转人工。 [called im_handoff]"  # the agent's words are its own
    assert not page.script_time  # a simulation at real time: the shop's clock


def call(call_id: str, name: str) -> dict[str, str]:
    return {"id": call_id, "name": name, "arguments": "{}"}


def test_tools_that_only_read_fold_and_a_send_that_registered_nothing_stays(settings):
    """Written by hand: a turn that looks up the history, sends (registered), fails to send
    (nothing registered), then closes; and a turn that only answers an operator."""
    log = SessionLog(session_path(settings.sessions_dir, "s1"))
    settings.sessions_dir.mkdir(parents=True, exist_ok=True)
    for kind, fields in [
        ("turn/start", {"turn": "t1", "batch_id": "b1", "kind": "batch"}),
        ("assistant/message", {"tool_calls": [call("c1", "im_query_history")]}),
        ("tool/result", {"call_id": "c1", "name": "im_query_history", "content": "[]"}),
        ("assistant/message", {"tool_calls": [call("c2", "im_send_message")]}),
        ("tool/result", {"call_id": "c2", "name": "im_send_message", "content": "ok", "request_id": "r2"}),
        ("assistant/message", {"tool_calls": [call("c3", "im_send_message")]}),
        ("tool/result", {"call_id": "c3", "name": "im_send_message", "content": "Error", "is_error": True}),
        ("assistant/message", {"text": "已回复顾客。"}),
        ("turn/end", {"turn": "t1", "outcome": "complete"}),
        ("turn/start", {"turn": "t2", "batch_id": "b2", "kind": "batch"}),
        ("assistant/message", {"text": "（回复运营人员）知识库里没有匹配的答案。"}),
        ("turn/end", {"turn": "t2", "outcome": "complete"}),
    ]:
        log.append(kind, **fields)
    log.flush()
    header = SessionHeader(id="s1", customer_id=1, created_at=0, origin=SessionOrigin.FIRST)
    notes = [(said(n, ZH), n.calls, n.folded) for n in agent_notes(settings.sessions_dir, header)]
    assert notes == [
        ("[调用 im_query_history]", ["im_query_history"], True),
        # c2 is its reply line; c3 registered nothing, so only this note tells of it
        ("[调用 im_send_message（没有登记发送）]", ["im_send_message"], False),
        ("已回复顾客。", [], True),
        ("（回复运营人员）知识库里没有匹配的答案。", [], False),  # the agent's only answer: in view
    ]


def test_a_table_of_times_names_the_shops_zone_once_under_it(kefu):  # `kefu`: the test's (English) settings
    with console.capture() as captured:
        print_table("outbox", ["request_id", "updated_at"], [["r1", "2026-03-03 09:00:00"]], timed=True)
        print_table("operators", ["name"], [["alice"]])
    lines = captured.get().splitlines()
    assert shop_zone() == "time: Asia/Shanghai (UTC+08:00)"  # the settings' default zone (时间：… in Chinese)
    assert [line for line in lines if line.startswith("time: ")] == [shop_zone()]
