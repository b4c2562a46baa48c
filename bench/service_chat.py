"""Synthetic Chinese customer-service conversations for `bench.memory_quality --lang zh`.

Each customer talks to the shop over many weeks; most turns are ordinary service chat
(shipping, coupons, sizes, thanks), and some plant facts: orders, addresses (changed later),
preferences, the shop's promises. Questions are paraphrased, not copied from the planted turns;
an abstract kind ("what do I like?") shares almost no words with its evidence.
"""

from __future__ import annotations

import random

from bench.persona_chat import Dialogue, Question
from runtime.memory.folders import ArchivedMessage

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


class _Customer:
    """One customer's messages as they are said."""

    def __init__(self) -> None:
        self.messages: list[ArchivedMessage] = []

    def say(self, user: str, assistant: str, at_ms: int) -> int:
        self.messages.append(ArchivedMessage(role="user", text=user, at_ms=at_ms))
        self.messages.append(ArchivedMessage(role="assistant", text=assistant, at_ms=at_ms + 1000))
        return len(self.messages) - 2


def generate(rng: random.Random, sessions: int) -> Dialogue:
    """One customer's conversation: filler sessions with planted facts, and the questions. The
    engine archives a customer's chat as it grows, not by session: one plan for all of it."""
    c = _Customer()
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
    questions = [
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
    return Dialogue(sessions=[c.messages], questions=questions)
