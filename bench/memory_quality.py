"""Memory recall quality on synthetic long customer-service conversations.

Each customer talks to the shop over many sessions; most turns are ordinary service chat
(shipping, coupons, sizes, thanks), and some plant facts: orders, addresses (changed later),
preferences, the shop's promises. Each question's evidence is a known set of turns. The whole
conversation is archived through the engine (folder planning, the store, the heuristic
scorer), and every question is asked three ways in the same run:

- kefu: the recall the agent gets (`select`: relevance-floored candidates, FAIR-DRI over σ),
  with a fresh lane state per question and k = 1, 5, 10;
- BM25 over whole folders (the same tokenizer, no keywords, no title or event signal);
- keywords only (the scorer's 3–8 keywords per folder, matched both ways).

Reported: folder-level evidence recall@1/@5/@10, any-hit (some evidence folder is among the
top k) and all-hit (every evidence folder is). Questions are paraphrased, not copied from the
planted turns; an abstract kind ("what do I like?") shares almost no words with its evidence.

    python -m bench.memory_quality [--customers 40] [--sessions 8] [--seed 11]
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from runtime.memory.folders import ArchivedMessage, plan_folders
from runtime.memory.heuristic import score_pending
from runtime.memory.recall import K1, RecallIndex, RecallState, select
from runtime.memory.store import MemoryStore
from runtime.memory.tokenize import tokens

KS = (1, 5, 10)
FILLER = [
    ("今天下单什么时候发货？", "现货48小时内发货，预售按页面时间。"),
    ("有优惠券吗", "店铺首页可以领满199减20的券。"),
    ("这个尺寸适合1.5米的床吗", "1.5米床选200x230的被套正合适。"),
    ("能开发票吗", "可以的，确认收货后在订单详情申请电子发票。"),
    ("好的谢谢", "不客气，有问题随时找我。"),
    ("发什么快递", "默认中通，顺丰需要补差价。"),
    ("能便宜点吗", "已经是活动价了，可以叠加店铺券。"),
    ("洗了会缩水吗", "建议冷水轻柔洗，基本不缩水。"),
    ("在吗", "在的，请问有什么可以帮您？"),
    ("物流怎么一直不动", "帮您催一下快递，稍后给您回复。"),
    ("可以用花呗吗", "支持花呗分期和信用卡。"),
    ("颜色有色差吗", "实物和图片基本一致，显示器不同会有轻微差异。"),
]
PRODUCTS = ["四件套", "羽绒被", "乳胶枕", "床垫", "蚕丝被", "毛毯", "凉席", "抱枕", "床笠", "夏凉被"]
CITIES = ["杭州市西湖区", "上海市浦东新区", "北京市朝阳区", "广州市天河区", "成都市武侯区", "南京市鼓楼区"]
ROADS = ["文三路", "世纪大道", "建国路", "天河北路", "人民南路", "中山北路"]
MATERIALS = ["纯棉", "真丝", "亚麻", "天丝", "竹纤维"]
COLOURS = ["深灰色", "藏青色", "大红色", "墨绿色", "咖啡色"]
GIFTS = ["一对枕套", "运费险", "一条毛巾", "一个收纳袋", "十元无门槛券"]
# Distractors: chat that names orders, places, products and materials without being the fact.
TEMPLATES = [
    ("帮我看看订单A{n}的物流", "订单A{n}已经到{city}中转站了。"),
    ("寄到{city}大概几天", "寄{city}一般两到三天。"),
    ("{product}有{material}的吗", "{product}有{material}款，页面可以选。"),
    ("{colour}的{product}还有货吗", "{colour}{product}有现货。"),
    ("朋友的订单A{n}能一起发吗", "不同订单需要分开发货哦。"),
]


@dataclass
class Question:
    text: str
    evidence: list[int]  # message indexes
    kind: str


@dataclass
class Customer:
    messages: list[ArchivedMessage] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    def say(self, user: str, assistant: str, at_ms: int) -> int:
        self.messages.append(ArchivedMessage(role="user", text=user, at_ms=at_ms))
        self.messages.append(ArchivedMessage(role="assistant", text=assistant, at_ms=at_ms + 1000))
        return len(self.messages) - 2


def generate(rng: random.Random, sessions: int) -> Customer:
    """One customer's conversation: filler sessions with planted facts, and the questions."""
    c = Customer()
    product, other = rng.sample(PRODUCTS, 2)
    order, order2 = f"A{rng.randint(10000, 99999)}", f"A{rng.randint(10000, 99999)}"
    first_city, second_city = rng.sample(CITIES, 2)
    road, number = rng.choice(ROADS), rng.randint(1, 300)
    material, colour, gift = rng.choice(MATERIALS), rng.choice(COLOURS), rng.choice(GIFTS)
    plants = [
        ("order", f"我刚下的订单{order}买的是{product}，麻烦尽快发货", "收到，订单已备注加急。"),
        ("address1", f"收货地址写{first_city}{road}{number}号", "好的，地址已经记下了。"),
        ("preference", f"我喜欢{material}的面料，{colour}的千万不要发", "明白，以后给您优先{material}款。"),
        ("order2", f"再买一个{other}，订单号{order2}", "好的，两个订单会分开发货。"),
        ("promise", "上次的包裹晚到了好几天", f"非常抱歉，下次发货时答应赠送您{gift}作为补偿。"),
        ("address2", f"地址改一下，搬到{second_city}了，还是{road}{number}号", "已帮您把地址改过来了。"),
    ]
    slots = sorted(rng.sample(range(sessions * 8), len(plants)))  # turns where facts are planted
    placed: dict[str, int] = {}
    day = 86_400_000
    turn = 0
    for session in range(sessions):
        for _ in range(rng.randint(8, 14)):
            at = 1_700_000_000_000 + session * 7 * day + turn * 60_000
            if plants and turn >= slots[len(placed)]:
                kind, user, assistant = plants.pop(0)
                placed[kind] = c.say(user, assistant, at)
            elif rng.random() < 0.3:
                q, a = rng.choice(TEMPLATES)
                values = {
                    "n": rng.randint(10000, 99999),
                    "city": rng.choice(CITIES),
                    "product": rng.choice(PRODUCTS),
                    "material": rng.choice(MATERIALS),
                    "colour": rng.choice(COLOURS),
                }
                c.say(q.format(**values), a.format(**values), at)
            else:
                (q1, a1), (q2, a2) = rng.sample(FILLER, 2)  # a turn of two questions
                c.say(f"{q1}，还有{q2}", f"{a1}{a2}", at)
            turn += 1
    while plants:  # a short conversation: the rest at the end
        kind, user, assistant = plants.pop(0)
        placed[kind] = c.say(user, assistant, 1_700_000_000_000 + sessions * 7 * day)
    c.questions = [
        Question(f"订单{order}现在到哪了？", [placed["order"]], "order-id"),
        Question(f"我买的那个{product}是哪个订单来着？", [placed["order"]], "product"),
        Question("我现在的收货地址是哪里？", [placed["address2"]], "address"),
        Question(f"我以前在{first_city.split('市')[0]}的地址还记得吗", [placed["address1"]], "old-address"),
        Question("我之前改过几次收货地址？两次地址分别是哪", [placed["address1"], placed["address2"]], "all-hit"),
        Question("我的偏好你还记得吗？", [placed["preference"]], "abstract"),
        Question("我说过喜欢什么面料？", [placed["preference"]], "preference"),
        Question("你们之前答应送我什么来着？", [placed["promise"]], "promise"),
        Question(f"{other}和{product}两个订单都发了吗", [placed["order"], placed["order2"]], "all-hit"),
    ]
    return c


def folder_of_messages(messages: list[ArchivedMessage], folders: list) -> dict[int, set[str]]:
    """Message index -> the folders holding its rendered text (plan_folders concatenates)."""
    spans, offset = [], 0
    for message in messages:
        text = f"{message.role}: {message.text}\n"
        spans.append((offset, offset + len(text)))
        offset += len(text)
    owners: dict[int, set[str]] = defaultdict(set)
    start = 0
    for folder, chars in folders:
        end = start + chars
        for index, (a, b) in enumerate(spans):
            if a < end and b > start:
                owners[index].add(folder)
        start = end
    return owners


def bm25_whole(index: RecallIndex, query: str, k: int) -> list[str]:
    """Plain BM25 over whole folders: the index's postings, no keyword or title/event signal."""
    n = len(index.folders)
    found: dict[str, float] = Counter()
    for term in set(tokens(query)):
        posting = index.posting(term)
        idf = math.log(1 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
        for folder_id, tf in posting.items():
            found[folder_id] += idf * tf * (K1 + 1) / (tf + index.norms[folder_id])
    return heapq.nlargest(k, found, key=lambda i: (found[i], i))


def keywords_only(index: RecallIndex, query: str, k: int) -> list[str]:
    lowered, terms = query.lower(), set(tokens(query))
    found: Counter[str] = Counter()
    for keyword, folder_ids in index.keyword_folders.items():
        if keyword in lowered or any(len(t) > 1 and t in keyword for t in terms):
            for folder_id in folder_ids:
                found[folder_id] += 1
    return heapq.nlargest(k, found, key=lambda i: (found[i], i))


def kefu_recall(index: RecallIndex, query: str, k: int) -> list[str]:
    picks, _ = select(index, query, RecallState(), k=k, r=min(2, k - 1))
    return picks


METHODS = {"kefu recall": kefu_recall, "BM25 whole folders": bm25_whole, "keywords only": keywords_only}


def run(customers: int, sessions: int, seed: int) -> tuple[dict, dict, int, int]:
    rng = random.Random(seed)
    hits: dict[tuple[str, int, str], int] = Counter()
    kinds: dict[tuple[str, str], int] = Counter()
    total = folders_total = 0
    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "memory.sqlite")
        for n in range(customers):
            customer = generate(rng, sessions)
            scope = f"customer-{n}"
            planned = plan_folders(customer.messages, 1200)
            made = store.commit_archive(scope, f"plan-{n}", planned)
            while score_pending(store, scope).updated:
                pass
            owners = folder_of_messages(customer.messages, [(f.id, f.chars) for f in made])
            folders_total += len(made)
            index = RecallIndex.build(store, scope)
            for question in customer.questions:
                total += 1
                evidence = [owners[i] for i in question.evidence]
                for method, rank in METHODS.items():
                    for k in KS:
                        got = set(rank(index, question.text, k))
                        hits[(method, k, "any")] += any(e & got for e in evidence)
                        hits[(method, k, "all")] += all(e & got for e in evidence)
                    kinds[(method, question.kind)] += any(e & set(rank(index, question.text, 10)) for e in evidence)
    return hits, kinds, total, folders_total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    hits, kinds, total, folders = run(args.customers, args.sessions, args.seed)
    console = Console()
    table = Table("method", *(f"{mode}@{k}" for mode in ("any", "all") for k in KS), title="evidence recall")
    for method in METHODS:
        row = [f"{hits[(method, k, mode)] / total:.3f}" for mode in ("any", "all") for k in KS]
        table.add_row(method, *row)
    console.print(table)
    question_kinds = sorted({kind for _, kind in kinds})
    by_kind = Table("method", *question_kinds, title="any-hit@10 by question kind")
    for method in METHODS:
        counts = Counter({kind: kinds[(method, kind)] for kind in question_kinds})
        by_kind.add_row(method, *(f"{counts[kind]}" for kind in question_kinds))
    console.print(by_kind)
    console.print(
        f"{args.customers} customers x {args.sessions} sessions: {folders} folders "
        f"({folders / args.customers:.0f} per customer), {total} questions; per kind out of {args.customers},"
        f" all-hit out of {2 * args.customers}"
    )


if __name__ == "__main__":
    main()
