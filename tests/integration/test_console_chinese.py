"""The console in the operator's language, in a real browser (issue 41, item 5): Simplified
Chinese by default (KEFU_LANGUAGE unset is zh_CN; the suite sets `en`, so this module puts the
default back), English by setting: the sign-in page, the conversations list with its live toast,
a conversation and a take-over, the ops page and the reports. The same ids and data-* values
either way: scripts never read words."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from runtime.admission.handling import pause_handling
from runtime.inbound.ingest import ingest_page
from tests.integration.conftest import after_submit, sign_in, text_of

pytestmark = pytest.mark.parametrize("broker_url", ["embedded"], indirect=True)  # no worker: the store is fed here


@pytest.fixture(autouse=True)
def language(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The console's language, set before its settings are read (autouse: before `settings`,
    after tests/conftest.py's `_isolated_env` sets `en`). Chinese unless a test asks otherwise,
    and then by KEFU_LANGUAGE as a shop would."""
    chosen = getattr(request, "param", None)
    if chosen is None:
        monkeypatch.delenv("KEFU_LANGUAGE")  # the default
    else:
        monkeypatch.setenv("KEFU_LANGUAGE", chosen)
    return chosen or "zh_CN"


def buyer(store, platform, transport, buyer_id: str, name: str, text: str) -> int:
    said = platform.buyer_says("shop", buyer_id, name, text)
    return ingest_page(store, transport.page_of("shop", [said])).customer_ids[0]


def texts(driver: WebDriver, selector: str) -> list[str]:
    return [
        str(t).strip()
        for t in driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.innerText)", selector
        )
    ]


def lang(driver: WebDriver) -> str:
    return str(driver.execute_script("return document.documentElement.lang"))


def test_the_console_speaks_simplified_chinese_by_default(console, browser, store, platform, transport):
    zhang_san = buyer(store, platform, transport, "b1", "张三", "什么时候发货？")
    li_si = buyer(store, platform, transport, "b2", "李四", "我要投诉")

    browser.get(f"{console}/login")
    assert lang(browser) == "zh-CN" and browser.title == "登录 · kefu 客服控制台"
    assert text_of(browser, "sign-in") == "登录" and texts(browser, "h1") == ["登录"]
    sign_in(browser, console, "alice")
    assert text_of(browser, "who") == "alice（客服）" and text_of(browser, "sign-out") == "退出登录"

    # The list: tabs, filters and columns in Chinese; a row's status in Chinese, its data-status raw.
    browser.get(f"{console}/?source=simulation")
    assert browser.title.endswith("kefu 客服控制台")  # after the tab's badge, if any
    filters = ["我的", "未分配", "全部", "全部状态", "进行中", "待处理", "已解决", "稍后处理"]
    assert texts(browser, "#filters a") == filters
    assert texts(browser, "#conversations th")[:4] == ["买家 / 群", "最新消息", "未读", "状态"]
    assert texts(browser, f'tr[data-customer="{zhang_san}"][data-status="open"] .status-tag') == ["进行中"]
    assert text_of(browser, "ops-link") == "运营" and text_of(browser, "canned-link") == "快捷回复"

    # A handoff after the page looked: the row turns 待处理 and the toast says so in Chinese.
    WebDriverWait(browser, 10).until(lambda d: d.execute_script("return !!sessionStorage.getItem('kefu-seen-alice')"))
    pause_handling(store, li_si, "买家投诉", handoff=True)
    WebDriverWait(browser, 10).until(lambda d: "等待人工：李四" in text_of(d, "toasts"))
    WebDriverWait(browser, 10).until(
        lambda d: texts(d, f'tr[data-customer="{li_si}"][data-status="waiting"] .status-tag') == ["待处理"]
    )
    assert "人工：买家投诉" in texts(browser, f'tr[data-customer="{li_si}"] .paused')

    # A conversation: its controls, and what taking over changes, in Chinese.
    browser.get(f"{console}/c/{li_si}")
    assert browser.title.endswith("李四 · kefu 客服控制台") and "1 个会话等待人工" in text_of(browser, "notices")
    assert text_of(browser, "conversation-status") == "待处理" and text_of(browser, "assignee") == "未分配"
    assert [text_of(browser, i) for i in ("take-over", "assign", "snooze", "resolve", "send", "mark-read")] == [
        "接管",
        "分配",
        "稍后处理",
        "标为已解决（交还智能客服）",
        "以 alice 身份发送",
        "标为已读",
    ]
    assert texts(browser, "h2") == ["内部备注 仅本店客服可见，不会发送给买家", "记忆引擎保存的买家信息"]
    browser.find_element(By.ID, "take-over").click()
    after_submit(browser).until(lambda d: text_of(d, "assignee") == "已分配给 alice")
    assert text_of(browser, "hand-back") == "交还给智能客服"
    assert text_of(browser, "handling").startswith("人工接待中：买家投诉")
    assert browser.find_element(By.ID, "handling").get_attribute("data-status") == "open"

    # The ops page, as the admin sees it.
    sign_in(browser, console, "ada")
    browser.get(f"{console}/ops")
    assert browser.title.endswith("运营 · kefu 客服控制台") and texts(browser, "h1") == ["运营"]
    assert text_of(browser, "who") == "ada（管理员）" and text_of(browser, "input-state") == "正常接收中"
    assert text_of(browser, "input-pause") == "暂停接收" and "等待人工" in texts(browser, "h2")[0]
    browser.get(f"{console}/reports")
    assert browser.title.endswith("报表 · kefu 客服控制台") and texts(browser, "h1") == ["报表"]
    assert (text_of(browser, "report-show"), text_of(browser, "report-csv")) == ("查看", "下载 CSV")
    assert text_of(browser, "report-zone").startswith("时区：")


@pytest.mark.parametrize("language", ["en"], indirect=True)
def test_the_console_speaks_english_by_setting(console, browser, store, platform, transport, language):
    customer = buyer(store, platform, transport, "b1", "张三", "什么时候发货？")
    browser.get(f"{console}/login")
    assert lang(browser) == "en" and browser.title == "sign in · kefu console"
    assert text_of(browser, "sign-in") == "sign in" and texts(browser, "h1") == ["Sign in"]
    sign_in(browser, console, "alice")
    assert text_of(browser, "who") == "alice (operator)"

    browser.get(f"{console}/?source=simulation")
    assert texts(browser, "#filters a")[:3] == ["mine", "unassigned", "all"]
    assert texts(browser, f'tr[data-customer="{customer}"] .status-tag') == ["open"]
    browser.get(f"{console}/c/{customer}")
    assert text_of(browser, "take-over") == "take over" and text_of(browser, "assignee") == "unassigned"
    browser.get(f"{console}/ops")
    assert texts(browser, "h1") == ["Operations"] and text_of(browser, "input-state") == "taking in pages"
    browser.get(f"{console}/reports")
    assert texts(browser, "h1") == ["Reports"] and text_of(browser, "report-show") == "show"
