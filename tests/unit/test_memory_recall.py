"""Recall: unscored folders never recall, lexical matching over full text, deterministic
FAIR-DRI picks (100 replays identical), the high-alpha same-round guarantee, the bounded
latency of a low-alpha memory under a flood of high-alpha matches, and relevance first within
every lane."""

from __future__ import annotations

from runtime.memory.folders import ArchivedMessage, plan_folders
from runtime.memory.judge import judge
from runtime.memory.recall import RecallIndex, RecallState, select
from runtime.memory.store import MemoryStore


def archive(store: MemoryStore, texts: list[str], plan: str) -> list[str]:
    messages = [ArchivedMessage(role="user", text=t, at_ms=n) for n, t in enumerate(texts)]
    return [f.id for f in store.commit_archive("c1", plan, plan_folders(messages, target_chars=1))]


def score(store: MemoryStore, ids: list[str], alpha: float, keywords: list[str]) -> None:
    updates = [{"id": i, "alpha": alpha, "beta": 1, "keywords": keywords} for i in ids]
    assert judge(store, "c1", {"updates": updates}).rejected == []


def test_only_scored_folders_match_and_full_text_counts(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    scored = archive(store, ["订单A1024改地址到杭州西湖区", "发票抬头写公司全称"], "p1")
    unscored = archive(store, ["订单A1024也在这里"], "p2")
    score(store, scored, 0.5, ["其他", "无关", "词语"])  # keywords that do not match: the text does
    matches = RecallIndex.build(store, "c1").scores("A1024 的地址改好了吗")
    assert set(matches) == {scored[0]} and unscored[0] not in matches


def test_picks_are_deterministic_over_100_replays(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    ids = archive(store, [f"快递{n}号问题" for n in range(30)], "p1")
    for n, folder_id in enumerate(ids):
        score(store, [folder_id], round(0.05 + (n % 10) / 10, 2), ["快递", "问题", f"编号{n}"])
    index = RecallIndex.build(store, "c1")
    runs = set()
    for _ in range(100):
        state = RecallState()
        rounds = []
        for _ in range(4):
            picks, state = select(index, "快递问题", state.model_copy(update={"block": []}))
            rounds.append(tuple(picks))
        runs.add(tuple(rounds))
    assert len(runs) == 1


def test_a_matched_high_alpha_memory_appears_in_the_same_round_and_low_alpha_is_not_starved(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    high = archive(store, [f"退货政策{n}" for n in range(40)], "p-high")
    score(store, high[:7], 0.9, ["退货", "政策", "说明"])  # 7 ≤ k − r matched high-alpha memories
    score(store, high[7:], 0.65, ["退货", "政策", "旧版"])  # and a flood of other high-alpha matches
    low = archive(store, [f"退货闲聊{n}" for n in range(6)], "p-low")
    score(store, low, 0.1, ["退货", "闲聊", "记录"])
    index = RecallIndex.build(store, "c1")

    state = RecallState()
    seen_low: set[str] = set()
    for round_no in range(5):
        picks, state = select(index, "退货", state)
        if round_no == 0:
            assert set(high[:7]) <= set(picks) and len(picks) == 10  # the top high-alpha ones at once
        assert len(set(picks) & set(low)) == 2  # r = 2 slots kept whatever the flood
        seen_low |= set(picks) & set(low)
    # 6 low-alpha matches: one probe slot (the strongest) and one rotating slot for the other
    # five: every one within ⌈5 / (r − 1)⌉ = 5 rounds.
    assert seen_low == set(low)


def test_a_weak_match_is_not_a_candidate(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    [policy, chat] = archive(store, ["退货政策：七天无理由，运费险赔付", "退货闲聊"], "p1")
    score(store, [policy, chat], 0.5, ["记录", "客服", "其他"])
    index = RecallIndex.build(store, "c1")
    assert set(index.scores("运费险赔付的退货政策")) == {policy, chat}  # both share 退货
    assert index.candidates("运费险赔付的退货政策") == [policy]  # under 35% of the best is noise


def test_a_folder_in_the_block_is_picked_again_while_it_matches_and_is_held_once(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    ids = archive(store, ["地址改到杭州", "地址改到北京", "发票抬头"], "p1")
    score(store, ids, 0.7, ["地址", "改址", "城市"])
    index = RecallIndex.build(store, "c1")
    first, state = select(index, "杭州地址", RecallState())
    again, state = select(index, "杭州地址", state)  # what a round finds does not depend on the block
    assert again == first and first[0] == ids[0] and ids[2] not in first
    assert state.block == first and state.round == 2
    invoice, state = select(index, "发票", state)
    assert invoice == [ids[2]] and state.block == [*first, ids[2]]


def test_picks_come_strongest_first_whatever_their_alpha_or_age(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    texts = [
        "we talked about the weather and a painting class",
        "Caroline said the painting class was fun",
        "Caroline finished a sunrise painting for the painting class at the lake",
    ]
    old, middle, strongest = archive(store, texts, "p1")
    score(store, [old], 0.9, ["weather", "class", "talk"])
    score(store, [middle], 0.7, ["class", "fun", "said"])
    score(store, [strongest], 0.2, ["sunrise", "lake", "finish"])
    index, query = RecallIndex.build(store, "c1"), "When did Caroline paint a sunrise for her class?"
    picks, _ = select(index, query, RecallState())
    found = index.scores(query)
    assert picks[0] == strongest  # low alpha, created last: the probe slot, first in the picks
    assert [found[i] for i in picks] == sorted(found[i] for i in picks)[::-1]
    assert set(picks) == {old, middle, strongest}  # "painting" is "paint", "class" matches in all


def test_keywords_match_both_ways(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    [gateway, port] = archive(store, ["内部服务配置", "另一条配置"], "p1")
    score(store, [gateway], 0.7, ["接口网关 8080", "配置", "服务"])  # a multi-word keyword
    score(store, [port], 0.7, ["端口", "配置项", "默认值"])
    index = RecallIndex.build(store, "c1")
    assert gateway in index.scores("网关挂了")  # a message token inside the keyword
    assert port in index.scores("默认端口是多少")  # the keyword inside the message


def test_the_recall_state_survives_a_restart_exactly(tmp_path):
    from runtime.memory.recall import load_state, save_state

    store = MemoryStore(tmp_path / "m.sqlite")
    ids = archive(store, [f"尺码问题{n}" for n in range(8)], "p1")
    score(store, ids, 0.2, ["尺码", "问题", "衣服"])
    index = RecallIndex.build(store, "c1")
    _, state = select(index, "尺码", RecallState())
    state = state.model_copy(update={"ledger": {ids[0]: 1}, "deferred": {ids[1]: 3}})  # every lane's memory
    save_state(store, "c1", state)
    restarted = MemoryStore(tmp_path / "m.sqlite")
    restored = load_state(restarted, "c1")
    assert restored == state and restored.model_dump_json() == state.model_dump_json()
    # The next round continues the rotation exactly as without the restart.
    fresh = {"block": []}
    assert select(index, "尺码", restored.model_copy(update=fresh)) == select(
        index, "尺码", state.model_copy(update=fresh)
    )
    assert load_state(restarted, "c2") == RecallState()
    store.save_recall_state("c3", '{"round": 4, "low_cursor": null, "block": ["x"]}')  # saved before the lanes
    assert load_state(store, "c3") == RecallState(round=4, block=["x"])


def test_the_rotation_wraps_around_without_repeating_a_folder(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    high = archive(store, [f"退货政策{n}" for n in range(8)], "p-high")
    score(store, high, 0.9, ["政策", "说明", "规定"])
    low = archive(store, [f"退货闲聊{n}" for n in range(9)], "p-low")  # 9 > τ = 8: 闲聊 is not rare
    score(store, low, 0.1, ["闲聊", "记录", "其他"])
    index = RecallIndex.build(store, "c1")
    state, rotated = RecallState(), []
    for _ in range(5):  # k = 10, r = 3: 7 high, the probe (equal matches: σ's first) and 2 rotating
        picks, state = select(index, "退货", state, k=10, r=3)
        assert set(high[:7]) <= set(picks) and low[0] in picks and len(picks) == 10
        rotated += [i for i in picks if i in low[1:]]
    assert sorted(rotated[:8]) == sorted(low[1:])  # each of the other eight once in four rounds
    assert rotated[8:] == low[1:3]  # then around again from the start


def test_a_rare_term_is_recalled_at_once_whatever_its_alpha(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    crowd = archive(store, [f"订单A{n:05d}什么时候发货" for n in range(30)], "p-crowd")
    score(store, crowd, 0.9, ["订单", "发货", "时间"])
    [exact] = archive(store, ["订单A77777改地址到杭州"], "p-exact")
    score(store, [exact], 0.1, ["改址", "杭州", "记录"])
    picks, _ = select(index := RecallIndex.build(store, "c1"), "订单A77777发货了吗", RecallState(), k=1, r=0)
    assert picks == [exact]  # one slot: the exact order number wins over 30 high-alpha σ picks
    assert exact in select(index, "订单A77777发货了吗", RecallState())[0]


def test_a_question_naming_a_category_finds_high_alpha_memories_of_that_class(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    [liked, chat] = archive(store, ["我最爱纯棉面料，深色的别发", "聊聊天气"], "p1")
    score(store, [liked], 0.8, ["纯棉", "面料", "喜好"])
    score(store, [chat], 0.2, ["天气", "闲聊", "喜好"])  # low alpha: a class never floods recall
    index = RecallIndex.build(store, "c1")
    assert set(index.scores("还记得我的偏好吗")) == {liked}  # 偏好 and 喜好 are one class
    assert index.scores("我们约定过什么") == {}


def test_function_words_are_never_rare_and_a_content_word_is(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    chat = archive(store, [f"how does his day go, which one {n}" for n in range(3)], "p-chat")
    [violin] = archive(store, ["the violin lessons started"], "p-violin")
    score(store, [*chat, violin], 0.2, ["chat", "talk", "misc"])
    index = RecallIndex.build(store, "c1")
    assert index.rare_matches("which does his") == []  # in ≤ τ folders, but function words
    assert index.rare_matches("Which instrument does his violin teacher use?") == [violin]


def test_a_keyword_matches_by_token_not_inside_another_word(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    [cat, other] = archive(store, ["our pet stays home", "a long story"], "p1")
    score(store, [cat], 0.5, ["cat", "pet", "home"])
    score(store, [other], 0.5, ["at", "it", "story"])
    index = RecallIndex.build(store, "c1")
    assert cat in index.scores("Where is the cat?")
    assert set(index.scores("What is the category of education?")) == set()  # no "cat" or "at" inside words


def test_a_date_asked_in_words_meets_the_time_label_of_its_folder(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    may, june = archive(
        store,
        [
            "[2023-05-08 14:00] [counterpart Melanie] we went out",
            "[2023-06-02 10:00] [counterpart Melanie] we went out",
        ],
        "p1",
    )
    score(store, [may, june], 0.2, ["out", "went", "day"])
    index = RecallIndex.build(store, "c1")
    assert select(index, "What did Melanie do on 8 May 2023?", RecallState())[0][0] == may
    assert select(index, "What happened in June?", RecallState())[0] == [june]


def test_the_heuristics_keywords_count_only_where_they_add_to_the_text(tmp_path):
    from runtime.memory.heuristic import score_pending

    store = MemoryStore(tmp_path / "m.sqlite")
    [liked, order] = archive(store, ["我喜欢纯棉的面料", "订单A10240发货了吗"], "p1")
    assert score_pending(store, "c1").updated == [liked, order]
    assert "喜好" in store.folder(liked).keywords and "订单" in store.folder(order).keywords  # shown as given
    index = RecallIndex.build(store, "c1")
    assert index.keyword_folders == {"喜好": [liked]}  # the category keyword only: the rest is the text's own
    assert liked in index.scores("我的喜好是什么")
    judge(store, "c1", {"updates": [{"id": order, "alpha": 0.9}]})  # the model rescores, keywords as they were
    assert RecallIndex.build(store, "c1").keyword_folders == {"喜好": [liked]}  # still the heuristic's words


def test_min_alpha_leaves_lower_memories_out_of_recall(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    [low, high] = archive(store, ["退货闲聊", "退货政策"], "p1")
    score(store, [low], 0.1, ["闲聊", "记录", "其他"])
    score(store, [high], 0.7, ["政策", "说明", "规定"])
    assert set(RecallIndex.build(store, "c1").scores("退货")) == {low, high}
    gated = RecallIndex.build(store, "c1", min_alpha=0.5)
    assert set(gated.scores("退货")) == {high} and select(gated, "退货", RecallState())[0] == [high]


def test_a_rounds_budget_keeps_the_strongest_picks_that_fit_and_always_the_first(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    ids = archive(store, ["退货" * 3 + "壶" * 200, "退货" * 2 + "壶" * 300, "退货" + "壶" * 400], "p1")
    score(store, ids, 0.7, ["退货", "售后", "政策"])
    index = RecallIndex.build(store, "c1")
    assert select(index, "退货", RecallState())[0] == ids  # strongest first, no budget
    picks, state = select(index, "退货", RecallState(), budget_chars=400)
    assert picks == ids[:1] and state.lanes["budget_cut"] == 2 and state.block == ids[:1]
    picks, state = select(index, "退货", RecallState(), budget_chars=10)
    assert picks == ids[:1]  # a round that finds something adds it, whatever its size


def high_flood(store: MemoryStore, word: str, count: int, plan: str) -> list[str]:
    """`count` high-alpha folders matching `word`, strongest first (the longer, the weaker)."""
    ids = archive(store, [word * 3 + "壶" * (40 + n) for n in range(count)], plan)
    score(store, ids, 0.9, [word, "记录", "其他"])
    return ids


def test_a_trimmed_high_alpha_memory_is_boosted_back_only_after_its_cooldown(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    strong = high_flood(store, "退货", 20, "p1")
    [weak] = archive(store, ["退货" * 2 + "壶" * 60], "p2")
    score(store, [weak], 0.9, ["售后", "记录", "其他"])
    index = RecallIndex.build(store, "c1")
    assert weak in index.candidates("退货")
    assert weak not in select(index, "退货", RecallState(), k=4, r=1)[0]  # 20 stronger matches fill the quota
    state = RecallState(round=5, block=[weak]).with_block([], [weak], index.folders)
    assert state.ledger == {weak: 5}
    for _ in range(2):  # cooling down: it competes on its strength alone
        picks, state = select(index, "退货", state, k=4, r=1, cooldown=2)
        assert weak not in picks and state.lanes["boost"] == 0
    picks, state = select(index, "退货", state, k=4, r=1, cooldown=2)
    assert weak in picks and state.lanes["boost"] == 1 and state.counters.re_injections == 1
    assert picks[:3] == strong[:3] and state.ledger == {}  # the stronger matches still come first
    low = archive(store, ["退货闲聊" + "壶" * 40], "p3")
    score(store, low, 0.1, ["闲聊", "记录", "其他"])
    assert RecallState().with_block([], low, RecallIndex.build(store, "c1").folders).ledger == {}  # high alpha only


def test_deferred_high_alpha_matches_fill_later_free_slots_never_a_current_match_and_expire(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    returns = high_flood(store, "退货", 10, "p1")
    [invoice] = high_flood(store, "发票", 1, "p2")
    index = RecallIndex.build(store, "c1")
    first, state = select(index, "退货", RecallState(), k=4, r=1)
    assert first == returns[:4] and list(state.deferred) == returns[4:]  # lookahead 3 × (k − r) = 9
    again, after_again = select(index, "退货", state, k=4, r=1)
    assert again == returns[:4]  # a deferral never takes the slot of this round's match
    picks, later = select(index, "发票", state, k=4, r=1)
    assert picks[0] == invoice and picks[1:] == returns[4:7] and later.lanes["register"] == 3
    assert later.deferred == {i: 3 for i in returns[7:]}  # deferred in round 1 until round 1 + REGISTER_TTL
    cut, kept = select(index, "发票", state, k=4, r=1, budget_chars=1)
    assert cut == [invoice] and kept.deferred == state.deferred  # what the budget left out waits on
    expired = state.model_copy(update={"round": 3})  # deferred in round 1 for REGISTER_TTL = 2 rounds
    assert select(index, "查询不到的话", expired, k=4, r=1)[0] == []


def test_a_full_register_drops_and_counts_and_more_rare_matches_than_the_quota_count_as_degraded(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    for word, plan in (("退货", "p1"), ("发票", "p2"), ("尺码", "p3")):
        high_flood(store, word, 10, plan)  # 10 > τ = 8: no rare term
    index = RecallIndex.build(store, "c1")
    state = RecallState()
    for query in ("退货", "发票", "尺码"):  # each round defers 3 × (k − r) = 3, the register holds 8
        _, state = select(index, query, state, k=2, r=1)
    assert len(state.deferred) == 8 and state.counters.register_drops == 1
    rare = archive(store, ["订单A77777", "订单A77777补发", "订单A77777退款"], "p4")
    score(store, rare, 0.3, ["订单", "记录", "其他"])
    picks, state = select(RecallIndex.build(store, "c1"), "A77777", state, k=2, r=1)
    assert len(picks) == 2 and state.counters.degraded == 1  # 3 exact references, k − r = 1 rare slot


def test_a_scopes_index_is_kept_until_its_folders_or_scores_change(tmp_path):
    store = MemoryStore(tmp_path / "m.sqlite")
    first = archive(store, ["订单A1024改地址到杭州西湖区"], "p1")
    score(store, first, 0.5, ["地址", "订单", "杭州"])
    index = RecallIndex.of(store, "c1")
    assert RecallIndex.of(store, "c1") is index  # nothing changed: not read again
    score(store, first, 0.9, ["地址", "订单", "杭州"])  # the same postings, another score
    rescored = RecallIndex.of(store, "c1")
    assert rescored is not index and rescored.folders[first[0]].alpha == 0.9
    second = archive(store, ["发票抬头写公司全称"], "p2")
    score(store, second, 0.5, ["发票", "抬头", "公司"])
    grown = RecallIndex.of(store, "c1")
    assert set(grown.folders) == {*first, *second} and second[0] in grown.scores("发票抬头")
    store.delete_scope("c1")
    assert RecallIndex.of(store, "c1").folders == {}
