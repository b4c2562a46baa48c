"""Synthetic Chinese multi-day shop memory for `bench.memory_quality --lang days` (issue 39).

One dialogue is one shop's memory store: one target buyer's days (8 by default) hidden among
the days of 15–25 other buyers over the same two to three months. Everyone talks about the same
catalogue (山屿户外, an invented outdoor-gear shop: 32 products with model codes) with the same
kinds of requests in the same phrasing: orders, sizes and colours, addresses that change,
preferences, the shop's recommendations and promises, complaints, exchanges, logistics and
ordinary chat. Target and distractors are simulated by the same code; only the questions tell
the target apart.

A session is one buyer's day (Asia/Shanghai), 4–10 exchanges; the buyer's lines carry kefu's
labels (`_label`), the shop's are plain. Messages date things as people do ("我4月27号下的单",
"前天拍的", "上周五到的"), always from their own day.

The questions are the target's, asked on a later day (`asked_at_ms`), in other words than the
evidence (they share a product or topic word at most, besides the date):

- date: the evidence day named absolutely (4月27号, 2024年5月6日, 五月六号, 5月6号周一);
- relative: named from the asking day (昨天, 前天晚上, 三天前, 上周五, 上个星期二);
- shop-said: what the shop recommended, answered, promised or noted;
- user-said: what the buyer said about themselves or asked for;
- changed: the current value of something that changed (address, phone, size); the evidence is
  the message with the latest value.

Each question can be answered from the store alone: no other buyer's day holds what it names
(its day and product; its kind of fact and context). Distractor days are drawn after the
questions and redrawn where they would clash; they still use every word the questions use.

Everything here (shop, products, names, places, sentences, questions) was written for this
benchmark; none of it comes from a public dataset.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from bench.persona_chat import Dialogue, Question, _label
from runtime.memory.folders import ArchivedMessage

ZONE = ZoneInfo("Asia/Shanghai")
RETURN_ADDRESS = "杭州市余杭区仓前街道良睦路1398号山屿户外售后组"
CLOTHES = ("S", "M", "L", "XL", "XXL")


@dataclass(frozen=True)
class Category:
    name: str
    label: str  # what its option is called (容量, 尺码, 码数, 规格); "" when it has none
    options: tuple[str, ...]
    colours: tuple[str, ...]
    defects: tuple[tuple[str, str], ...]  # what a buyer finds wrong, the part the shop can resend ("": none)
    aspects: tuple[tuple[str, str], ...]  # how a buyer asks about it, the word a later question uses
    wear: str = ""  # 鞋, 衣服, 裤子: follows the buyer's size


@dataclass(frozen=True)
class Product:
    series: str
    code: str
    category: str
    reason: str  # why the shop recommends it
    answers: tuple[str, ...]  # one per aspect of its category

    @property
    def name(self) -> str:
        return f"{self.series}{self.code}{self.category}"


SHOE_SIZES = tuple(str(n) for n in range(36, 46))
CATEGORIES = {
    c.name: c
    for c in (
        Category(
            "保温杯",
            "容量",
            ("350ml", "500ml", "750ml"),
            ("月白", "墨黑", "雾蓝", "樱粉", "橄榄绿"),
            (("杯盖拧紧了还是往外渗水", "杯盖"), ("里面一股塑料味", ""), ("杯身磕掉了一块漆", "杯套")),
            (("装开水能热多久", "保温时间"), ("能不能装汽水", "能不能装碳酸饮料")),
        ),
        Category(
            "帐篷",
            "规格",
            ("双人", "三到四人"),
            ("沙色", "军绿", "橙色"),
            (("地钉少了好几根", "地钉"), ("门帘拉链老是卡住", "拉链头"), ("有一根帐杆是弯的", "帐杆")),
            (("有多重", "重量"), ("下大雨漏不漏", "防水")),
        ),
        Category(
            "天幕",
            "规格",
            ("3x3米", "4x5米"),
            ("沙色", "黑胶银"),
            (("一条边的缝线开了", "修补胶带"), ("少了一根天幕杆", "天幕杆")),
            (("连杆子有多重", "重量"), ("防晒效果怎么样", "防晒")),
        ),
        Category(
            "睡袋",
            "温标",
            ("10℃", "0℃", "-5℃"),
            ("深蓝", "酒红", "灰色"),
            (("一直往外钻毛", ""), ("拉链头掉了", "拉链头")),
            (("多少度能用", "适用温度"), ("有多重", "重量")),
        ),
        Category(
            "充气垫",
            "规格",
            ("单人", "双人"),
            ("橙色", "墨绿"),
            (("睡一晚上就漏气了", "修补贴"), ("气嘴关不严", "气嘴")),
            (("隔凉效果怎么样", "保暖"), ("收起来有多大", "收纳体积")),
        ),
        Category(
            "防潮垫",
            "规格",
            ("单人", "双人"),
            ("黄色", "灰绿"),
            (("有一块压塌了弹不回来", ""),),
            (("隔凉怎么样", "保暖"), ("折起来多大", "收纳体积")),
        ),
        Category(
            "登山杖",
            "材质",
            ("碳纤维", "铝合金"),
            ("黑色", "钛灰"),
            (("锁扣锁不紧，一撑就缩", ""), ("杖尖磨秃了", "杖尖套")),
            (("有多重", "重量"), ("能调多长", "长度")),
        ),
        Category(
            "冲锋衣",
            "尺码",
            CLOTHES,
            ("黑色", "藏青", "雾霾蓝", "橘红", "松绿"),
            (("袖口开线了", ""), ("拉链拉到一半就卡", "")),
            (("防水到什么程度", "防水"), ("衣长多少", "衣长")),
            wear="衣服",
        ),
        Category(
            "抓绒衣",
            "尺码",
            CLOTHES,
            ("燕麦色", "深灰", "酒红"),
            (("洗了一次就起球", ""),),
            (("厚不厚", "厚度"), ("能机洗吗", "洗法")),
            wear="衣服",
        ),
        Category(
            "速干裤",
            "尺码",
            CLOTHES,
            ("黑色", "卡其", "深灰"),
            (("裤脚的抽绳断了", "抽绳"), ("口袋拉链坏了", "")),
            (("多久能干", "速干"), ("裤长多少", "裤长")),
            wear="裤子",
        ),
        Category(
            "徒步鞋",
            "码数",
            SHOE_SIZES,
            ("灰绿", "卡其", "黑色"),
            (("鞋底前面开胶了", ""), ("鞋带断了一根", "鞋带")),
            (("防不防水", "防水"), ("重不重", "重量")),
            wear="鞋",
        ),
        Category(
            "溯溪鞋",
            "码数",
            SHOE_SIZES,
            ("蓝灰", "黑色"),
            (("鞋面有个地方脱线了", ""),),
            (("排水怎么样", "排水"), ("重不重", "重量")),
            wear="鞋",
        ),
        Category(
            "头灯",
            "",
            (),
            ("黑色", "橙色"),
            (("充不进电", "充电线"), ("头带松了戴不住", "头带")),
            (("最亮有多亮", "亮度"), ("充一次电能用多久", "续航")),
        ),
        Category(
            "营地灯",
            "",
            (),
            ("米白", "军绿"),
            (("挂钩断了", "挂钩"), ("开关按了没反应", "")),
            (("能亮多久", "续航"), ("电池多大", "电池容量")),
        ),
        Category(
            "炉头",
            "",
            (),
            (),
            (("点火器打不着", "点火器"), ("阀门有点漏气", "")),
            (("用什么气罐", "气罐"), ("火力多大", "火力")),
        ),
        Category(
            "套锅",
            "规格",
            ("一到两人", "三到四人"),
            (),
            (("锅把松了", "锅把"), ("少了个收纳袋", "收纳袋")),
            (("容量多大", "容量"), ("重不重", "重量")),
        ),
        Category(
            "折叠椅",
            "",
            (),
            ("军绿", "卡其", "黑色"),
            (("椅布撕了个口子", "椅布"), ("一条腿的卡扣卡不住", "")),
            (("能承重多少", "承重"), ("收起来多重", "重量")),
        ),
        Category(
            "折叠桌",
            "",
            (),
            ("原木色", "黑色"),
            (("桌腿有点晃", ""),),
            (("桌面多大", "尺寸"), ("能放多重的东西", "承重")),
        ),
        Category(
            "背包",
            "背长",
            ("S/M", "M/L"),
            ("黑色", "靛蓝", "橙色"),
            (("背带连接的地方开线了", ""), ("少了防雨罩", "防雨罩")),
            (("空包多重", "重量"), ("侧袋能放多大的水壶", "侧袋")),
        ),
        Category(
            "防晒帽",
            "尺码",
            ("M", "L"),
            ("米白", "卡其", "浅蓝"),
            (("帽檐里的定型条断了", ""),),
            (("防晒指数多少", "防晒"), ("帽檐多宽", "帽檐")),
        ),
        Category(
            "徒步袜",
            "尺码",
            ("M", "L"),
            ("灰色", "藏青"),
            (("袜跟磨破了", ""),),
            (("是什么材质", "材质"), ("一包几双", "几双")),
        ),
        Category(
            "净水器",
            "",
            (),
            (),
            (("出水特别慢", "滤芯"),),
            (("滤芯能用多久", "滤芯寿命"), ("过滤精度多少", "过滤精度")),
        ),
        Category(
            "保温箱",
            "容量",
            ("20L", "35L"),
            ("白色", "军绿"),
            (("盖子合不严", ""), ("少了冰板", "冰板")),
            (("保冰能保多久", "保冰"), ("能装多少东西", "容量")),
        ),
        Category(
            "吊床",
            "",
            (),
            ("迷彩", "天蓝"),
            (("绑带短了挂不上", "绑带"),),
            (("能承重多少", "承重"), ("绑带多长", "绑带")),
        ),
        Category(
            "护膝",
            "尺码",
            ("S", "M", "L"),
            ("黑色",),
            (("侧面的弹簧戳出来了", ""),),
            (("有什么支撑", "支撑"), ("怎么选码", "选码")),
        ),
        Category(
            "野餐垫",
            "规格",
            ("2x2米", "2x3米"),
            ("格子红", "森林绿"),
            (("背面起皮了", ""),),
            (("防不防水", "防水"), ("收起来多大", "收纳体积")),
        ),
        Category(
            "咖啡套装",
            "",
            (),
            ("银色", "黑色"),
            (("磨豆器转不动", "磨芯"),),
            (("磨豆器是什么磨芯", "磨芯"), ("一次能冲几杯", "容量")),
        ),
        Category(
            "雨衣",
            "尺码",
            ("M", "L", "XL"),
            ("军绿", "亮黄", "深蓝"),
            (("帽子的抽绳掉了", "抽绳"),),
            (("能罩住背包吗", "罩背包"), ("帽子是什么样的", "帽子")),
            wear="衣服",
        ),
        Category(
            "手套",
            "尺码",
            ("S", "M", "L"),
            ("黑色", "灰色"),
            (("触屏的手指不灵了", ""),),
            (("保不保暖", "保暖"), ("能触屏吗", "触屏")),
        ),
    )
}
PRODUCTS = [
    Product(
        "云脊",
        "XR-220",
        "保温杯",
        "316不锈钢内胆，一只手就能开盖",
        ("开水装进去12个小时还有六十多度", "不建议装汽水，会把盖子顶开"),
    ),
    Product("溪石", "XR-350", "保温杯", "容量大，带提绳和茶隔", ("保温能到24小时左右", "汽水可乐都别装，会胀气顶盖")),
    Product("栖木", "QB-118", "保温杯", "很轻，才两百多克", ("大概能保温8个小时", "可以装，但别装太满")),
    Product("北坡", "TK-300", "帐篷", "速开结构，一个人两分钟能搭好", ("整顶3.2公斤", "防水指数3000毫米，中雨没问题")),
    Product(
        "远岫", "TK-520", "帐篷", "前厅大，放东西坐人都宽敞", ("5.6公斤，适合开车去营地", "4000毫米防水，大雨也不怕")
    ),
    Product("苍岭", "LT-2", "帐篷", "单人超轻，背着走不累", ("只有1.1公斤", "2000毫米防水，小雨可以")),
    Product("晴岚", "SK-45", "天幕", "银胶涂层厚，夏天底下凉快", ("连杆子一共2.4公斤", "UPF50+，紫外线基本挡住")),
    Product("松野", "SB-900", "睡袋", "鹅绒填充，压缩完只有水杯那么大", ("舒适温度零下5度", "1.2公斤")),
    Product("鹿鸣", "SB-260", "睡袋", "棉的好打理，整个能机洗", ("舒适温度10度左右", "1.8公斤")),
    Product("溪石", "AP-60", "充气垫", "自带脚踩气泵，不用嘴吹", ("R值3.2，春秋都够用", "收起来像一瓶矿泉水")),
    Product("云脊", "FM-12", "防潮垫", "蛋巢结构，铺碎石地上也不硌", ("R值2.0", "折起来和背包侧袋差不多宽")),
    Product("苍岭", "TP-07", "登山杖", "碳纤维的，一根才两百克", ("一根200克", "外锁调节，最长135厘米")),
    Product("远岫", "JK-680", "冲锋衣", "三合一带抓绒内胆，冬天也能穿", ("防水10000毫米", "L码衣长74厘米")),
    Product("北坡", "JK-330", "冲锋衣", "单层薄款，春秋挡风刚好", ("防水5000毫米", "L码衣长71厘米")),
    Product(
        "栖木", "FL-210", "抓绒衣", "摇粒绒不扎人，能当外套也能当内胆", ("200克的绒，秋天单穿可以", "能机洗，用轻柔档")
    ),
    Product("晴岚", "PT-15", "速干裤", "四面弹，爬山抬腿不勒", ("晾两个小时就干", "L码裤长102厘米")),
    Product("苍岭", "HK-41", "徒步鞋", "大底抓地好，碎石路不打滑", ("有防水膜，过小溪没问题", "单只420克")),
    Product("鹿鸣", "HK-19", "徒步鞋", "软底好走路，平时也能穿", ("不防水，只防泼溅", "单只360克")),
    Product("溪石", "WS-33", "溯溪鞋", "鞋底有排水孔，湿了也不闷", ("鞋底两侧有排水孔，出水就干", "单只280克")),
    Product("晴岚", "HL-400", "头灯", "红白双光，挥手感应就能开", ("最高400流明", "充满电强光能用4个小时")),
    Product("云脊", "HL-90", "头灯", "只有60克，跑起来不晃", ("最亮90流明", "能用10个小时左右")),
    Product("栖木", "CL-5", "营地灯", "暖光不刺眼，还能当充电宝", ("最长能亮36个小时", "5200毫安")),
    Product("北坡", "ST-2", "炉头", "分体式的，风大也稳", ("用扁气罐，也能接长气罐", "3000瓦")),
    Product("远岫", "CK-3", "套锅", "硬质氧化铝，锅盖能当煎盘", ("一个1.6升加一个0.9升", "一共680克")),
    Product("松野", "CH-88", "折叠椅", "高靠背能靠头，坐久了不累", ("承重150公斤", "收起来1.3公斤")),
    Product("鹿鸣", "CH-20", "折叠椅", "月亮椅窝着舒服，还带杯架", ("承重120公斤", "收起来2公斤")),
    Product("松野", "TB-120", "折叠桌", "铝合金蛋卷桌，六个人围着坐也够", ("桌面120乘60厘米", "承重30公斤")),
    Product("远岫", "BP-40", "背包", "背负系统透气，背一天后背不湿", ("空包1.3公斤", "侧袋能放1升的水壶")),
    Product("苍岭", "BP-28", "背包", "28升刚好一日装，胸带上有哨子", ("空包780克", "侧袋能放750毫升的瓶子")),
    Product("晴岚", "HT-6", "防晒帽", "大帽檐带披风，脖子也晒不到", ("UPF50+", "帽檐9厘米")),
    Product("鹿鸣", "SK-3", "徒步袜", "美利奴羊毛的，走一天脚不闷", ("70%美利奴羊毛", "一包三双")),
    Product("溪石", "WF-10", "净水器", "能直接接在水袋上，山泉水过滤就能喝", ("一个滤芯能滤1000升", "0.1微米")),
    Product("北坡", "IC-35", "保温箱", "冰块放两天还不化", ("冰能保持48小时", "能放下两排易拉罐")),
    Product("栖木", "HM-2", "吊床", "双人宽度，带防蚊网", ("承重200公斤", "绑带3米长")),
    Product("苍岭", "KP-5", "护膝", "有弹簧侧撑，下山膝盖不疼", ("弹簧侧撑加硅胶垫", "按膝盖上方10厘米的腿围选")),
    Product("鹿鸣", "PM-200", "野餐垫", "背面防水，草地湿也不渗", ("背面有PE防水层", "折起来像个手提包")),
    Product("云脊", "CF-1", "咖啡套装", "磨豆器、滤杯和壶都能装进一个杯子里", ("陶瓷磨芯，手摇的", "一次能冲两杯")),
    Product("北坡", "RC-7", "雨衣", "雨披款，能连背包一起罩住", ("能罩住40升以内的背包", "连帽带硬帽檐")),
    Product("远岫", "GL-3", "手套", "触屏指，戴着也能刷手机", ("抓绒内里，零下几度没问题", "拇指和食指都能触屏")),
]
BY_CATEGORY: dict[str, list[Product]] = {}
for _product in PRODUCTS:
    BY_CATEGORY.setdefault(_product.category, []).append(_product)
# What a buyer wants it for: (how the buyer says it, how the shop sums it up, how a later question
# puts it, the model that suits it)
NEEDS: dict[str, list[tuple[str, str, str, str]]] = {
    "保温杯": [
        ("每天上班路上喝", "通勤", "上下班带着喝", "QB-118"),
        ("给家里老人用", "老人用", "给我爸妈用", "XR-220"),
        ("冬天爬山带热水", "爬山", "登山时候装热水", "XR-350"),
    ],
    "帐篷": [
        ("周末带孩子去营地", "带娃露营", "一家人出去扎营", "TK-520"),
        ("一个人徒步背着走", "单人徒步", "自己背着走长线", "LT-2"),
        ("夏天去海边过夜", "海边", "去沙滩上住一晚", "TK-300"),
    ],
    "睡袋": [
        ("十月份去山里露营", "秋天山里", "天冷了在山上过夜", "SB-900"),
        ("自驾的时候睡车里", "车宿", "睡车上", "SB-260"),
    ],
    "冲锋衣": [
        ("冬天骑电动车上班挡风", "骑车通勤", "骑车上班穿", "JK-330"),
        ("去川西徒步", "高原徒步", "去高海拔的地方走线", "JK-680"),
    ],
    "背包": [
        ("当天来回爬个山", "一日徒步", "一天往返的短线", "BP-28"),
        ("三天两夜的重装线", "多日徒步", "背好几天的长线", "BP-40"),
    ],
    "徒步鞋": [
        ("走碎石多的山路", "碎石路", "路不好走的山上", "HK-41"),
        ("平时逛公园也想穿", "日常穿", "平常上街穿", "HK-19"),
    ],
    "头灯": [
        ("晚上夜跑", "夜跑", "天黑以后跑步", "HL-90"),
        ("露营晚上起夜照路", "营地照明", "营地里夜里走路", "HL-400"),
    ],
    "折叠椅": [("钓鱼一坐一整天", "钓鱼", "在河边坐很久", "CH-88"), ("带去音乐节", "音乐节", "户外听演出", "CH-20")],
    "保温箱": [("夏天去海边带冰饮料", "海边冰饮", "带冰可乐出去玩", "IC-35")],
    "炉头": [("在山上煮面", "山顶做饭", "在山上烧水泡面", "ST-2")],
}

SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林罗高郑梁谢宋唐许韩冯邓曹彭曾肖田董潘袁蔡蒋余于杜叶程魏苏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"  # noqa: E501
GIVEN = "晓雨欣子涵梓轩宇浩然思远俊杰嘉怡雅琪文博一诺佳颖书瑶明哲亦凡若曦泽楷语桐沐阳可馨心怡靖川芷若云舒景行安然星河予安清和知夏北辰南乔映雪听澜"  # noqa: E501
CITIES = {
    "杭州市": ("西湖区", "拱墅区", "滨江区", "余杭区"),
    "上海市": ("闵行区", "徐汇区", "杨浦区", "浦东新区"),
    "成都市": ("武侯区", "锦江区", "成华区", "郫都区"),
    "南京市": ("鼓楼区", "江宁区", "建邺区"),
    "武汉市": ("洪山区", "江汉区", "武昌区"),
    "西安市": ("雁塔区", "碑林区", "未央区"),
    "广州市": ("天河区", "海珠区", "番禺区"),
    "北京市": ("海淀区", "朝阳区", "丰台区"),
    "长沙市": ("岳麓区", "雨花区"),
    "厦门市": ("思明区", "湖里区"),
    "昆明市": ("五华区", "盘龙区"),
    "苏州市": ("姑苏区", "吴中区"),
}
ROADS = tuple(
    """望湖路 青枫路 丰收路 学苑街 云栖路 长庆街 桂溪东路 翠柏路 星光大道 锦绣路
    银杏路 朝晖路 和平西路 新河街 梧桐路 白沙路 盈湖路 振兴东路 枫香路 玉兰街""".split()
)
COMMUNITIES = tuple(
    """绿洲花园 金桂苑 枫林湾 滨河一号 阳光新城 翠湖小区 幸福里 春华苑
    澜庭 东方名苑 云锦苑 橡树湾 半山小区 江南世家 紫荆园""".split()
)
BUILDINGS = ("中和大厦", "星汇中心", "科创园3号楼", "数字港大厦", "汇金写字楼", "未来park", "万联广场B座")
SCHOOLS = ("东湖理工学院", "明德师范学院", "长岭财经学院", "西津职业技术学院", "南屏医学院")
HOTELS = ("栖庭酒店", "锦途商务酒店", "山水间酒店", "悦居酒店")
COURIERS = {"中通": "78", "圆通": "YT", "韵达": "43", "顺丰": "SF", "京东物流": "JDX", "极兔": "JT", "申通": "77"}
HUBS = ("杭州", "金华", "上海", "武汉", "郑州", "长沙", "成都", "广州", "南京", "西安")
GIFTS = ("登山扣", "速干毛巾", "收纳袋", "驱蚊手环", "营地挂绳", "保温杯套")
PLACES = ("武功山", "四姑娘山", "太白山", "莫干山", "千岛湖", "雨崩", "长白山", "黄山", "秦岭", "稻城", "苍山", "大理")
JOBS = (
    ("护士", "经常上夜班"),
    ("外卖骑手", "一天到晚在外面跑"),
    ("中学老师", "只有寒暑假能出去玩"),
    ("摄影师", "老扛着机器爬山"),
    ("地质队的", "一出野外就是半个月"),
    ("导游", "一年大半时间在山里转"),
    ("程序员", "只有周末能出门"),
)
PETS = ("柯基", "边牧", "金毛", "柴犬", "布偶猫", "萨摩耶")
PET_NAMES = ("豆包", "可乐", "年糕", "芝麻", "土豆", "球球", "奶茶", "大福")
ALLERGENS = ("羊毛", "乳胶", "鸭绒", "镍")
WEEKDAYS = "一二三四五六日"
DIGITS = "零一二三四五六七八九"

Turn = tuple[str, str]


def cn_number(n: int) -> str:
    """1 to 31 in Chinese numerals (二十七)."""
    if n < 10:
        return DIGITS[n]
    tens, ones = divmod(n, 10)
    return ("" if tens == 1 else DIGITS[tens]) + "十" + (DIGITS[ones] if ones else "")


def weekday_name(day: date, rng: random.Random) -> str:
    w = day.weekday()
    prefix = rng.choice(("周", "周", "星期", "礼拜"))
    return prefix + ("天" if w == 6 and prefix != "周" and rng.random() < 0.5 else WEEKDAYS[w])


def absolute_day(day: date, rng: random.Random) -> str:
    """The day written as a buyer writes it: 4月27号, 5月6日, 2024年5月6日, 五月六号, 5月6号周一."""
    m, d = day.month, day.day
    forms = [
        (f"{m}月{d}号", 5),
        (f"{m}月{d}日", 3),
        (f"{day.year}年{m}月{d}日", 2),
        (f"{day.year}年{m}月{d}号", 1),
        (f"{cn_number(m)}月{cn_number(d)}号", 2),
        (f"{m}月{d}号{weekday_name(day, rng)}", 1),
        (f"{m}月{d}", 1),
    ]
    return rng.choices([f for f, _ in forms], [w for _, w in forms])[0]


def relative_day(day: date, today: date, rng: random.Random, at: datetime | None = None) -> str | None:
    """`day` named from `today` (昨天, 前天, 三天前, 上周五), with the time of day when `at` gives
    one; None when no relative form fits (further than last week)."""
    n = (today - day).days
    forms: list[str] = []
    if n == 1:
        forms += ["昨天"] * 3
    elif n == 2:
        forms += ["前天"] * 3
    elif n == 3:
        forms += ["大前天", "三天前", "3天前"]
    elif 4 <= n <= 6:
        forms += [f"{cn_number(n)}天前", f"{n}天前"]
    this_monday = today - timedelta(days=today.weekday())
    w = day.weekday()
    if this_monday - timedelta(days=7) <= day < this_monday:
        name = WEEKDAYS[w]
        forms += [f"上周{name}", f"上周{name}", f"上星期{name}", f"上个星期{name}", f"上礼拜{name}", f"上个礼拜{name}"]
        if w == 6:
            forms.append(rng.choice(("上周日", "上个星期天", "上礼拜天")))
    elif this_monday <= day < today and n >= 2:
        forms.append(f"这周{WEEKDAYS[w]}")
    if not forms:
        return None
    said = rng.choice(forms)
    if at is not None and rng.random() < 0.4 and not said.endswith("前"):
        if at.hour >= 18:
            said += "晚上"
        elif 13 <= at.hour < 18:
            said += "下午"
        elif at.hour < 11:
            said += rng.choice(("上午", "早上"))
    return said


def day_ref(day: date, today: date, rng: random.Random) -> str:
    """An earlier day as a message on `today` names it: relative when close, else the date."""
    if rng.random() < 0.7:
        near = relative_day(day, today, rng)
        if near is not None:
            return near
    if (today - day).days <= 25 and day.month != today.month and rng.random() < 0.3:
        return f"上个月{day.day}号"
    return f"{day.month}月{day.day}号" if rng.random() < 0.8 else f"{day.month}月{day.day}日"


# --- people -------------------------------------------------------------------------------


@dataclass
class Address:
    full: str
    short: str
    district: str


@dataclass
class Order:
    product: Product
    day: date
    number: str
    option: str
    colour: str
    tracked: bool = False
    troubled: bool = False


@dataclass
class Buyer:
    name: str
    phone: str
    city: str
    clothes: str
    shoes: str
    address: Address | None = None
    orders: list[Order] = field(default_factory=list)
    recommended: list[Product] = field(default_factory=list)
    done: set[str] = field(default_factory=set)  # episode kinds and fact types already had
    address_changes: int = 0
    disliked: str = ""


@dataclass
class Fact:
    """Something a day holds that a question can ask about."""

    kind: str  # order, recommend, spec, logistics, promise, exchange, address, phone, size, personal, preference
    topic: str  # what a question about its day names: the product category, 地址, 电话
    key: tuple[str, ...]  # what a question without a date names
    turn: int  # exchange within its episode (then within its day)
    sides: dict[str, tuple[str, ...]]  # answer -> the messages holding it ("user", "shop")
    data: dict[str, str]
    day: date = date.min
    local: dict[str, int] = field(default_factory=dict)  # side -> message index within the day
    offset: int = -1  # of its day's first message in the dialogue
    at: datetime | None = None  # when the buyer said it


@dataclass
class Episode:
    turns: list[Turn]
    facts: list[Fact]
    apply: Callable[[Buyer], None] = lambda buyer: None


@dataclass
class Session:
    buyer: str
    day: date
    messages: list[ArchivedMessage]
    facts: list[Fact]


def _phone(rng: random.Random) -> str:
    return f"1{rng.choice('3589')}{rng.randint(0, 9)}{rng.randrange(10**8):08d}"


def _home(rng: random.Random, city: str) -> Address:
    district, road = rng.choice(CITIES[city]), rng.choice(ROADS)
    number, community = rng.randint(1, 399), rng.choice(COMMUNITIES)
    room = f"{rng.randint(1, 30)}幢{rng.randint(1, 4)}单元{rng.randint(1, 28)}0{rng.randint(1, 4)}"
    return Address(f"{city}{district}{road}{number}号{community}{room}", f"{district}{community}", district)


def _address_for(rng: random.Random, buyer: Buyer, reason: str) -> Address:
    city = buyer.city
    district = rng.choice(CITIES[city])
    road, number = rng.choice(ROADS), rng.randint(1, 399)
    if reason == "单位":
        building = rng.choice(BUILDINGS)
        return Address(f"{city}{district}{road}{number}号{building}{rng.randint(2, 28)}楼前台", building, district)
    if reason == "学校":
        school = rng.choice(SCHOOLS)
        return Address(
            f"{city}{district}{school}{rng.randint(1, 16)}号宿舍楼{rng.randint(1, 6)}0{rng.randint(1, 9)}",
            school,
            district,
        )
    if reason == "驿站":
        community = rng.choice(COMMUNITIES)
        return Address(f"{city}{district}{road}{community}南门菜鸟驿站", f"{community}驿站", district)
    if reason == "出差":
        city = rng.choice([c for c in CITIES if c != buyer.city])
        district, hotel = rng.choice(CITIES[city]), rng.choice(HOTELS)
        return Address(f"{city}{district}{rng.choice(ROADS)}{number}号{hotel}前台", f"{city[:-1]}{hotel}", district)
    if reason == "父母":
        return _home(rng, rng.choice(list(CITIES)))
    return _home(rng, city)


# Address changes: reason -> (what the buyer says, with {a} the address and {old} the old district;
# how a later question names the reason)
ADDRESS_REASONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "搬家": (
        (
            "我搬家了，以后寄到{a}",
            "地址换了哈，刚搬到{a}",
            "新家地址：{a}，之前那个别寄了",
            "我从{old}搬走了，新地址是{a}",
        ),
        ("我搬了新家以后", "搬完家之后", "我不在{old}住了以后"),
    ),
    "单位": (
        ("白天家里没人，以后寄我单位吧：{a}", "改寄公司，{a}，前台会代收", "家里收不到，以后发到我上班的地方：{a}"),
        ("改寄到上班那边以后", "让你们发公司以后", "改成寄单位之后"),
    ),
    "父母": (
        ("这段时间住我爸妈那，寄{a}", "地址先改成我妈家：{a}，收件人写我", "以后发我老家吧，{a}"),
        ("改寄到我爸妈家以后", "让你们寄到家里老人那边以后"),
    ),
    "驿站": (
        ("小区快递不让进了，以后直接放驿站：{a}", "帮我改成{a}，我下班自己去拿", "别送上门了，放{a}就行"),
        ("改成自己去驿站取以后", "让你们放代收点以后"),
    ),
    "学校": (
        ("开学了，寄到学校：{a}", "我回学校了，地址改成{a}", "以后寄宿舍吧，{a}"),
        ("我回学校以后", "改寄宿舍以后"),
    ),
    "出差": (
        ("我出差一个月，这阵子寄到{a}", "先寄我出差住的酒店：{a}", "这个月我在外地，寄{a}"),
        ("出差那阵子", "我在外地出差那会儿"),
    ),
}
PHONE_REASONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "换号": (
        ("我换手机号了，新的是{new}，{tail}结尾那个别打了", "号码换了，以后打{new}"),
        ("我换了新号以后", "后来换号时"),
    ),
    "停机": (
        ("原来的号停机了，以后联系{new}", "{tail}那个号不用了，已经停了，打{new}"),
        ("原来那个号停了以后", "老号码停掉以后"),
    ),
    "家人": (
        ("电话留我{rel}的吧，{new}，我上班老接不到", "收件电话改成我{rel}的，{new}"),
        ("让你们改打家里人电话以后", "留了家里人的号码以后"),
    ),
    "工作号": (
        ("联系电话改成我的工作号{new}，白天都能接", "以后打我工作手机{new}"),
        ("改留工作号以后", "换成单位那个手机以后"),
    ),
}


class _Day:
    """What an episode needs to know: the rng, the buyer, the day, what it must not clash with."""

    def __init__(self, rng: random.Random, buyer: Buyer, day: date, reserved: set[tuple[str, ...]]) -> None:
        self.rng, self.buyer, self.day, self.reserved = rng, buyer, day, reserved

    def say(self, *options: str) -> str:
        return self.rng.choice(options)

    def free(self, *facts: Fact) -> bool:
        """No fact clashes with a question's anchors: its content, or its topic on its day."""
        return not any(f.key in self.reserved or ("on", self.day.isoformat(), f.topic) in self.reserved for f in facts)

    def product_ref(self, p: Product) -> str:
        return self.rng.choice(
            (p.name, p.category, p.category, f"{p.code}{p.category}", p.code, f"{p.series}{p.category}")
        )

    def ack(self) -> str:
        return self.say(
            "好的，给您备注了。",
            "明白，已经记在您的资料里了。",
            "收到，以后会注意的。",
            "好的亲，记下了。",
            "好嘞，这边都备注好了。",
        )


def _spec_text(order_colour: str, option: str, label: str) -> str:
    parts = [x for x in (order_colour, option) if x]
    if label and option and order_colour:
        return f"{order_colour}，{label}{option}"
    return "".join(parts) or "默认款"


def ep_recommend(c: _Day) -> Episode | None:
    cat = c.rng.choice(list(NEEDS))
    i = c.rng.randrange(len(NEEDS[cat]))
    said, short, asked, code = NEEDS[cat][i]
    p = next(p for p in BY_CATEGORY[cat] if p.code == code)
    fact = Fact(
        "recommend",
        cat,
        ("recommend", cat, str(i)),
        0,
        {"code": ("shop",)},
        {"cat": cat, "code": p.code, "need": asked},
    )
    if not c.free(fact) or f"need:{cat}{i}" in c.buyer.done:
        return None
    turns = [
        (
            c.say(
                f"想买个{cat}，主要是{said}，有推荐吗",
                f"{said}的话，买哪款{cat}合适？",
                f"帮我挑个{cat}吧，{said}用",
                f"我打算{said}，你们家{cat}哪个好",
                f"问一下，{said}选什么{cat}比较好",
            ),
            c.say(
                f"推荐您{p.name}，{p.reason}，{short}很合适。",
                f"{short}的话推荐{p.series}{p.code}，{p.reason}。",
                f"建议您看看{p.code}这款，{p.reason}，{short}正合适。",
                f"{short}我推荐{p.code}，{p.reason}，好多顾客买了都说不错。",
            ),
        )
    ]
    others = [o for o in BY_CATEGORY[cat] if o != p]
    if others and c.rng.random() < 0.5:
        o = c.rng.choice(others)
        turns.append(
            (
                c.say(f"那{o.code}呢？", f"{o.code}是不是更便宜", f"我看{o.code}评价也挺多的"),
                f"{o.code}也不错，{o.reason}，不过{short}还是{p.code}更合适。",
            )
        )
    if c.rng.random() < 0.6:
        turns.append(
            (
                c.say("那我考虑一下", "行，我先加购物车", "好，晚点下单", "我跟家里人商量下", "有优惠吗？"),
                c.say("好的，想好了随时找我。", "好的亲，有活动我提醒您。", "这周满299减30，可以一起用。"),
            )
        )

    def apply(b: Buyer) -> None:
        b.recommended.append(p)
        b.done.add(f"need:{cat}{i}")

    return Episode(turns, [fact], apply)


def ep_order(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    waiting = [p for p in b.recommended if all(o.product != p for o in b.orders)]
    p = waiting[0] if waiting and rng.random() < 0.6 else rng.choice(PRODUCTS)
    cat = CATEGORIES[p.category]
    option = {"鞋": b.shoes, "衣服": b.clothes, "裤子": b.clothes}.get(cat.wear, "")
    option = option if option in cat.options else (rng.choice(cat.options) if cat.options else "")
    colours = [x for x in cat.colours if x != b.disliked]
    colour = rng.choice(colours) if colours else ""
    number = f"{rng.choice('2345')}{rng.randrange(10**15):015d}"
    spec = _spec_text(colour, option, cat.label)
    count = rng.choice(("", "", "", "两个", "两件")) if not cat.wear else ""
    sides: dict[str, tuple[str, ...]] = {"no": ("shop",), "code": ("user", "shop")}
    if colour:
        sides["colour"] = ("user", "shop")
    if option and cat.label:
        sides["option"] = ("user", "shop")
    fact = Fact(
        "order",
        p.category,
        ("order", p.code),
        0,
        sides,
        {"cat": p.category, "code": p.code, "colour": colour, "option": option, "label": cat.label, "no": number},
    )
    facts = [fact]
    turns = [
        (
            c.say(
                f"我拍了{p.name}，{spec}，麻烦尽快发",
                f"刚下单了{count}{p.code}，{spec}的",
                f"下单了哈，{p.category}要{spec}，别发错了",
                f"{p.series}{p.category}拍好了，{spec}，今天能发吗",
            ),
            c.say(
                f"收到亲，订单{number}，{p.code}{spec}，今天就给您安排。",
                f"好的，订单号{number}，已备注{p.code}{spec}，仓库今天打包。",
                f"看到了，{number}这单{p.code}{spec}，下午四点前发出。",
            ),
        )
    ]
    new_address = None
    if b.address is None:
        new_address = _home(rng, b.city)
        turns.append(
            (
                c.say(
                    f"地址{new_address.full}，{b.name}，{b.phone}",
                    f"收件人{b.name}，电话{b.phone}，地址{new_address.full}",
                    f"寄到{new_address.full}，电话{b.phone}",
                ),
                c.say(f"好的，{new_address.short}，已经帮您核对好了。", "地址和电话都记下了，发货前会再核对一遍。"),
            )
        )
        facts.append(
            Fact("address0", "地址", ("address", "first"), 1, {"address": ("user",)}, {"address": new_address.full})
        )
    if not c.free(*facts):
        return None
    if rng.random() < 0.3:
        turns.append(
            rng.choice(
                (
                    ("能开发票吗", "可以，确认收货后在订单里申请电子发票。"),
                    ("运费险有吗", "有的，默认送运费险。"),
                    ("大概几天到", "江浙沪次日，其他地方两三天。"),
                    ("能用花呗吗", "可以的，花呗信用卡都支持。"),
                )
            )
        )

    def apply(buyer: Buyer) -> None:
        buyer.orders.append(Order(p, c.day, number, option, colour))
        buyer.done.add("order")
        if new_address is not None:
            buyer.address = new_address

    return Episode(turns, facts, apply)


def ep_spec(c: _Day) -> Episode | None:
    p = c.rng.choice(PRODUCTS)
    cat = CATEGORIES[p.category]
    i = c.rng.randrange(len(cat.aspects))
    ask, aspect = cat.aspects[i]
    fact = Fact(
        "spec",
        p.category,
        ("spec", p.category, aspect),
        0,
        {"answer": ("shop",)},
        {"cat": p.category, "aspect": aspect, "code": p.code},
    )
    if not c.free(fact):
        return None
    turns = [
        (
            c.say(
                f"{p.code}{ask}？", f"请问{p.series}{p.category}{ask}", f"{p.category}{ask}啊", f"你们这个{p.name}{ask}"
            ),
            c.say(f"{p.code}{p.answers[i]}。", f"亲，{p.answers[i]}。", f"这款{p.answers[i]}，详情页也写了。"),
        )
    ]
    if c.rng.random() < 0.4:
        turns.append(
            (c.say("那还行", "明白了", "好的我再看看", "跟我想的差不多"), c.say("有问题随时问我～", "好的亲。"))
        )
    return Episode(turns, [fact])


def ep_logistics(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    orders = [o for o in b.orders if 1 <= (c.day - o.day).days <= 8 and not o.tracked]
    if not orders:
        return None
    o = rng.choice(orders)
    courier = rng.choice(list(COURIERS))
    track = COURIERS[courier] + "".join(str(rng.randint(0, 9)) for _ in range(13))
    fact = Fact(
        "logistics",
        o.product.category,
        ("logistics", o.product.code),
        0,
        {"courier": ("shop",), "track": ("shop",)},
        {"cat": o.product.category, "courier": courier},
    )
    if not c.free(fact):
        return None
    ref = day_ref(o.day, c.day, rng)
    what = c.product_ref(o.product)
    eta = c.say("明天", "后天", "明后天", "两三天")
    turns = [
        (
            c.say(
                f"{ref}拍的{what}到哪了",
                f"我{ref}下的单怎么还没动静，买的{what}",
                f"帮我查下{ref}买的{what}物流",
                f"{ref}那单{what}发了没",
            ),
            c.say(
                f"帮您查了，走的{courier}，运单号{track}，现在到{rng.choice(HUBS)}转运中心了，预计{eta}到。",
                f"{courier}已经揽收了，单号{track}，正常{eta}能到。",
                f"已经发出了，{courier}{track}，在{rng.choice(HUBS)}中转，{eta}应该能到。",
            ),
        )
    ]
    if rng.random() < 0.5:
        turns.append(
            (
                c.say("能帮我催一下吗，周末要用", "麻烦催催，着急用", "能不能快点"),
                c.say(f"好的，已经帮您联系{courier}催件了，今天给您回复。", "已经催了，有消息第一时间告诉您。"),
            )
        )

    def apply(buyer: Buyer) -> None:
        o.tracked = True

    return Episode(turns, [fact], apply)


def ep_complaint(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    orders = [o for o in b.orders if 2 <= (c.day - o.day).days <= 40 and not o.troubled]
    if not orders:
        return None
    o = rng.choice(orders)
    p, cat = o.product, CATEGORIES[o.product.category]
    defect, part = rng.choice(cat.defects)
    amount, gift = rng.choice((10, 15, 20, 30, 50)), rng.choice(GIFTS)
    remedies = [
        f"实在抱歉，给您换一个新的{p.category}，您先用运费险寄回，不用等我们收到就先给您发。",
        f"给您退{amount}元作为补偿，东西您留着用，您看可以吗？",
        f"真不好意思，给您补一张{amount}元无门槛券，下次下单再送您一个{gift}。",
        "寄回来我们免费修，来回运费我们出，修好给您发顺丰。",
    ]
    if part:
        remedies += [f"实在抱歉，我们答应免费给您补发一个{part}，明天就寄出。"] * 2
    remedy = rng.choice(remedies)
    fact = Fact("promise", p.category, ("promise", p.category), 1, {"remedy": ("shop",)}, {"cat": p.category})
    if not c.free(fact):
        return None
    ref = day_ref(o.day, c.day, rng) if rng.random() < 0.5 else "前几天"
    what = c.product_ref(p)
    turns = [
        (
            c.say(
                f"{ref}买的{what}，{defect}",
                f"你们这个{p.code}{defect}，怎么回事",
                f"买的{what}{defect}，你看看怎么弄",
                f"收到的{what}{defect}，有点失望",
            ),
            c.say(
                "非常抱歉给您添麻烦了，麻烦拍个照片给我看下。",
                "亲，实在不好意思，能发张图片吗？",
                "抱歉抱歉，方便拍个视频吗？",
            ),
        ),
        (c.say("[图片]", "[图片] 你看", "[视频]", "拍了，你看吧 [图片]"), remedy),
    ]
    if rng.random() < 0.7:
        turns.append(
            (
                c.say("行吧，那尽快", "好，那就这样", "嗯，别再出问题了", "可以"),
                c.say(
                    "已经给您备注了，单号出来第一时间发您。", "好的，这边已登记，您放心。", "感谢理解，这边马上处理。"
                ),
            )
        )

    def apply(buyer: Buyer) -> None:
        o.troubled = True
        buyer.done.add("trouble")

    return Episode(turns, [fact], apply)


def _next_size(size: str, step: int) -> str:
    sizes = SHOE_SIZES if size.isdigit() else CLOTHES
    i = max(0, min(len(sizes) - 1, sizes.index(size) + step))
    return sizes[i] if sizes[i] != size else sizes[i - step]


def ep_exchange(c: _Day) -> Episode | None:
    rng = c.rng
    orders = [
        o
        for o in c.buyer.orders
        if CATEGORIES[o.product.category].wear and o.option and 2 <= (c.day - o.day).days <= 30 and not o.troubled
    ]
    if not orders:
        return None
    o = rng.choice(orders)
    p = o.product
    step = rng.choice((1, -1))
    new = _next_size(o.option, step)
    small = CLOTHES.index(new) > CLOTHES.index(o.option) if not new.isdigit() else int(new) > int(o.option)
    feel = "偏小，穿着紧" if small else "偏大，空荡荡的"
    fact = Fact(
        "exchange", p.category, ("exchange", p.category), 0, {"new": ("user", "shop")}, {"cat": p.category, "new": new}
    )
    if not c.free(fact):
        return None
    turns = [
        (
            c.say(
                f"{p.category}{o.option}的{feel}，能换{new}吗",
                f"码拍错了，{p.code}{o.option}太{'小' if small else '大'}，想换成{new}",
                f"{day_ref(o.day, c.day, rng)}买的{p.category}有点{'小' if small else '大'}，{o.option}换{new}可以吗",
            ),
            c.say(
                f"可以换的，给您备注了换{new}，寄回地址是{RETURN_ADDRESS}，收到后两天内给您发出。",
                f"没问题，已经给您登记换成{new}码，寄回时写上订单号就行。",
                f"可以的亲，这边备注了换{new}，新的我们收到退件就发。",
            ),
        ),
    ]
    if rng.random() < 0.5:
        turns.append(
            rng.choice(
                (
                    ("寄回运费谁出", "有运费险的，退回运费会赔给您。"),
                    ("需要我自己联系快递吗", "您在订单里点退换货，会有快递上门取件。"),
                )
            )
        )

    def apply(buyer: Buyer) -> None:
        o.troubled = True
        buyer.done.add("trouble")

    return Episode(turns, [fact], apply)


def ep_address(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    if b.address is None or b.address_changes >= 2:
        return None
    reason = rng.choice(list(ADDRESS_REASONS))
    said, asked = ADDRESS_REASONS[reason]
    new = _address_for(rng, b, reason)
    old = b.address.district
    question = rng.choice(asked).format(old=old)
    fact = Fact(
        "address", "地址", ("address", reason), 0, {"address": ("user",)}, {"reason": reason, "asked": question}
    )
    if not c.free(fact):
        return None
    turns = [
        (
            rng.choice(said).format(a=new.full, old=old),
            c.say(
                f"好的，默认地址已改成{new.short}这边。",
                "收到，新地址已经登记，之后的单都发这里。",
                f"好的，改好了：{new.full}。",
            ),
        )
    ]
    if turns[0][1].endswith(f"{new.full}。"):
        fact.sides["address"] = ("user", "shop")

    def apply(buyer: Buyer) -> None:
        buyer.address = new
        buyer.address_changes += 1
        buyer.done.add("change")

    return Episode(turns, [fact], apply)


def ep_phone(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    if b.address is None or "phone" in b.done:
        return None
    reason = rng.choice(list(PHONE_REASONS))
    said, asked = PHONE_REASONS[reason]
    new = _phone(rng)
    fact = Fact(
        "phone",
        "电话",
        ("phone", reason),
        0,
        {"phone": ("user", "shop")},
        {"reason": reason, "asked": rng.choice(asked)},
    )
    if not c.free(fact):
        return None
    rel = rng.choice(("老公", "老婆", "妈", "爸", "姐"))
    turns = [
        (
            rng.choice(said).format(new=new, tail=b.phone[-4:], rel=rel),
            c.say(f"好的，联系电话已更新为{new}。", f"收到，以后联系{new}，旧号码已删除。"),
        )
    ]

    def apply(buyer: Buyer) -> None:
        buyer.phone = new
        buyer.done |= {"phone", "change"}

    return Episode(turns, [fact], apply)


def ep_size(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    kind = rng.choice(("鞋", "衣服", "裤子"))
    if f"size:{kind}" in b.done:
        return None
    old = b.shoes if kind == "鞋" else b.clothes
    new = _next_size(old, rng.choice((1, 1, -1)))
    worn = [o for o in b.orders if CATEGORIES[o.product.category].wear == kind]
    fact = Fact(
        "size",
        {"鞋": "鞋码", "衣服": "尺码", "裤子": "裤子"}[kind],
        ("size", kind),
        0,
        {"size": ("user", "shop")},
        {"kind": kind, "new": new},
    )
    if not c.free(fact):
        return None
    if kind == "鞋":
        said = c.say(
            f"上次{worn[-1].product.code}穿{old}码有点挤脚，以后我的鞋都按{new}码来"
            if worn
            else f"我脚最近穿{old}有点挤，以后给我拿{new}码的鞋",
            f"跟你说一下，我鞋码改了，以后都是{new}，别再发{old}了",
        )
    elif kind == "衣服":
        said = c.say(
            f"我最近胖了点，以后上衣都给我拿{new}",
            f"之前{old}的衣服有点紧，以后外套按{new}发",
            f"衣服尺码帮我改成{new}吧，{old}的我穿着{'紧' if CLOTHES.index(new) > CLOTHES.index(old) else '大'}",
        )
    else:
        said = c.say(f"裤子以后都按{new}码，{old}的腰有点勒", f"我裤子穿{new}的，之前说的{old}不对")
    turns = [
        (said, c.say(f"好的，已经在您的资料里备注了{kind}{new}，以后默认按这个。", f"收到，以后{kind}给您发{new}。"))
    ]

    def apply(buyer: Buyer) -> None:
        if kind == "鞋":
            buyer.shoes = new
        else:
            buyer.clothes = new
        buyer.done |= {f"size:{kind}", "change"}

    return Episode(turns, [fact], apply)


def ep_personal(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    kind = rng.choice(("child", "trip", "job", "allergy", "pet", "body", "gift"))
    if f"personal:{kind}" in b.done:
        return None
    cat = rng.choice(PRODUCTS).category
    key: tuple[str, ...] = ("personal", kind)
    reply = c.ack()
    if kind == "child":
        rel = rng.choice(("儿子", "女儿"))
        he = "他" if rel == "儿子" else "她"
        age = rng.randint(3, 14)
        said = c.say(
            f"给我{rel}买的，{he}今年{age}岁，个子{80 + 6 * age + rng.randint(-6, 6)}厘米左右",
            f"我{rel}{age}岁了，这个{cat}{he}能用吗",
            f"家里{rel}才{age}岁，{cat}会不会太大",
        )
        reply = c.say(
            "小朋友用的话建议选轻一点的款。", "可以的，好多家长给孩子买。", "孩子用没问题，注意别让他一个人操作就行。"
        )
        relq = rng.choice(("儿子", "小子", "男孩") if rel == "儿子" else ("闺女", "丫头", "女儿"))
        key = ("personal", kind, rel)
        asks = [
            f"我跟你说过我家{relq}几岁了吧？你按那个帮我挑挑",
            f"我家{relq}多大你还记得吗，之前提过的",
            f"之前聊天我说过{relq}年纪，多大来着",
        ]
    elif kind == "trip":
        act, actq = rng.choice((("徒步", "走线"), ("露营", "扎营"), ("自驾", "开车出去玩"), ("登山", "爬山")))
        place = rng.choice(PLACES)
        when = c.say("下个月", "月底", "下周", "过两周")
        said = c.say(
            f"{when}要去{place}{act}，{rng.randint(2, 6)}天，装备还没买齐",
            f"我们{when}去{place}{act}，这个{cat}赶得上吗",
            f"准备{when}去{place}那边{act}，想问问{cat}带哪个",
        )
        reply = c.say(
            f"{place}那边早晚温差大，记得带件保暖的。",
            "好的，需要装备清单的话我发您一份。",
            "祝您玩得开心，装备有问题随时问我。",
        )
        key = ("personal", kind, act)
        asks = [
            f"我之前跟你说要去哪儿{actq}来着？",
            f"我那趟{actq}的目的地跟你提过吧，是哪来着",
            f"你还记得我打算去什么地方{actq}吗",
            f"我说过要去{act}的那个地方是哪来着",
        ]
    elif kind == "job":
        job, detail = rng.choice(JOBS)
        said = c.say(
            f"我是{job}，{detail}",
            f"我做{job}的，{detail}，所以想买个结实点的",
            f"{detail}，我是{job}嘛",
            f"我工作是{job}，{detail}",
        )
        reply = c.say("辛苦了，那得选耐用点的。", "明白，给您挑结实耐用的款。", "了解，那轻便一点的更适合您。")
        asks = ["我跟你说过我是干什么工作的吗？", "我的职业之前跟你提过吧，是啥来着", "你还记得我是做哪行的不"]
    elif kind == "allergy":
        m = rng.choice(ALLERGENS)
        said = c.say(f"提醒一下，我对{m}过敏，别给我推{m}的", f"我{m}过敏，这个{cat}里面有没有{m}？")
        reply = c.say("好的，已经备注了，推荐的时候会避开。", "这款不含的，您放心，也给您备注了。")
        asks = ["我跟你说过我对啥过敏来着", "我过敏的那个东西你记下来没，是什么", "我哪种材料碰不得，之前说过的"]
    elif kind == "pet":
        pet, pname = rng.choice(PETS), rng.choice(PET_NAMES)
        said = c.say(
            f"我家{pet}也一起去，{pname}才{rng.randint(3, 11)}个月，有没有它能用的",
            f"露营要带上我家{pet}，它叫{pname}",
            f"{pname}是我家{pet}，每次出去都得带着",
        )
        reply = c.say(
            "可以带的，防潮垫铺厚一点它睡着舒服。",
            f"{pname}一定很可爱～出门记得带牵引绳。",
            "好的，有宠物能用的我提醒您。",
        )
        asks = ["我家那只小家伙是什么品种来着，我跟你说过", "我养的宠物跟你提过吧，是什么", "我家毛孩子叫啥你还记得不"]
    elif kind == "body":
        h, w = rng.randint(155, 188), rng.randint(90, 180)
        said = c.say(f"我身高{h}，体重{w}斤，平时穿{b.clothes}", f"{h}的个子，{w}斤，{cat}选哪个码")
        asks = [
            "我之前报给你的身高体重是多少来着？",
            "我的身材数据你那边还有吗，多高多重",
            "我多高多重之前说过的，你查下",
        ]
    else:
        rel = rng.choice(("老公", "老婆", "男朋友", "女朋友", "爸", "妈", "闺蜜", "哥"))
        said = c.say(
            f"这个是送我{rel}的，{rel}下个月过生日",
            f"买来给我{rel}当生日礼物的，包装好看点",
            f"送我{rel}的礼物，能帮忙写张贺卡吗",
        )
        reply = c.say("可以的，给您用礼盒装，不放价格单。", "好的，贺卡内容您发我就行。", "没问题，发货前给您包好。")
        asks = ["我说那个东西是买给谁的来着？", "上次买礼物我说送谁的，你记得不", "我之前那份礼物是给谁准备的"]
    fact = Fact("personal", "个人", key, 0, {"said": ("user",)}, {"asks": "\n".join(asks)})
    if not c.free(fact):
        return None

    def apply(buyer: Buyer) -> None:
        buyer.done |= {f"personal:{kind}", "personal"}

    return Episode([(said, reply)], [fact], apply)


def ep_preference(c: _Day) -> Episode | None:
    b, rng = c.buyer, c.rng
    kind = rng.choice(("courier", "contact", "colour", "time", "packaging"))
    if f"preference:{kind}" in b.done:
        return None
    disliked = ""
    if kind == "courier":
        good, bad = rng.sample(list(COURIERS), 2)
        said = c.say(
            f"以后都给我发{good}吧，差价我补",
            f"别发{bad}了，上次丢件了，以后只走{good}",
            f"我那边{bad}不送上门，发{good}",
            f"快递以后都走{good}吧，别的老是慢",
        )
        asks = [
            "我跟你们说过快递要走哪家吧？",
            "我对快递公司有要求的，你记得是哪家吗",
            "寄我的东西该用哪家物流，我交代过的",
        ]
    elif kind == "contact":
        why = rng.choice(("上班不方便接", "家里宝宝在睡觉", "我在医院上班", "开会多"))
        said = c.say(
            f"送货前别打电话，{why}，发短信就行",
            f"有事给我留言就好，别打电话，{why}",
            f"打电话我一般接不到，{why}，有事发短信",
        )
        asks = [
            "联系我的时候我交代过什么，还记得吧",
            "我之前说过怎么联系我比较方便？",
            "找我的话我说过用什么方式",
            "我说过打电话还是发短信找我来着？",
        ]
    elif kind == "colour":
        disliked = rng.choice(("橙色", "黑色", "军绿", "樱粉", "卡其", "酒红"))
        why = rng.choice(("看着太闷", "太扎眼了", "家里人说不好看", "显脏"))
        said = c.say(
            f"{disliked}的千万别给我发，{why}",
            f"我不喜欢{disliked}，{why}",
            f"以后别给我推{disliked}的，{why}",
            f"颜色上提个要求，{disliked}的我不要，{why}",
        )
        asks = ["我说过哪个颜色我不要来着？", "我讨厌的那个颜色你记着没", "有个颜色我跟你说别发的，是哪个"]
    elif kind == "time":
        alt = rng.choice(("周末送就行", "放门口就好", "放快递柜吧"))
        said = c.say(
            f"工作日白天家里没人，{alt}", f"周一到周五别送上门，{alt}", f"送货时间说一下，工作日白天没人，{alt}"
        )
        asks = ["我跟你说过什么时候送货方便吗", "送货时间我有什么要求来着", "我说过哪几天家里有人收快递"]
    else:
        said = c.say("这单是送人的，里面别放价格单", "包装帮我弄好看点，别放发票和吊牌价", "送人的，盒子别写价格")
        asks = ["我对包装提过什么要求来着", "寄送人的东西我之前交代过啥", "我说过包裹里什么东西别放吗"]
    fact = Fact("preference", "个人", ("preference", kind), 0, {"said": ("user",)}, {"asks": "\n".join(asks)})
    if not c.free(fact):
        return None

    def apply(buyer: Buyer) -> None:
        buyer.done |= {f"preference:{kind}", "preference"}
        if disliked:
            buyer.disliked = disliked

    return Episode([(said, c.ack())], [fact], apply)


EPISODES: dict[str, tuple[Callable[[_Day], Episode | None], float, str]] = {
    "order": (ep_order, 3.0, "order"),
    "spec": (ep_spec, 2.0, ""),
    "recommend": (ep_recommend, 2.0, "recommend"),
    "logistics": (ep_logistics, 3.0, ""),
    "complaint": (ep_complaint, 1.5, "trouble"),
    "exchange": (ep_exchange, 1.5, "trouble"),
    "address": (ep_address, 0.8, "change"),
    "phone": (ep_phone, 0.4, "change"),
    "size": (ep_size, 0.6, "change"),
    "personal": (ep_personal, 1.2, "personal"),
    "preference": (ep_preference, 1.0, "preference"),
}  # name -> (generator, weight, the requirement it meets)
REQUIRED = ("recommend", "order", "personal", "preference", "change", "trouble")

FILLER: list[Turn] = [
    ("今天下单今天能发吗", "下午四点前拍的当天发，晚了就第二天发。"),
    ("默认发什么快递", "默认中通或者韵达，要顺丰的话补个差价。"),
    ("有运费险吗", "有的，下单默认送运费险。"),
    ("最近有活动吗", "这周店铺满299减30，会员再打九五折。"),
    ("{cat}能用券吗", "可以的，店铺券全场通用。"),
    ("{code}有现货吗", "{code}现在有现货，拍下48小时内发。"),
    ("{cat}有{colour}的吗", "{colour}的有，页面上可以选。"),
    ("你们从哪里发货", "我们从杭州仓发货，江浙沪一般次日达。"),
    ("开发票怎么弄", "确认收货后在订单里点申请开票就行，电子发票。"),
    ("能货到付款吗", "暂时不支持货到付款哦。"),
    ("新疆包邮吗", "新疆西藏需要补运费，其他地区都包邮。"),
    ("{cat}保修多久", "质保一年，非人为损坏免费修。"),
    ("直播间的价格和店里一样吗", "直播间有专属券，拍的时候自动减。"),
    ("是正品吗", "都是品牌直供的，支持验货。"),
    ("能再便宜点吗", "已经是活动价啦，可以领一张店铺券。"),
    ("包装结实吗，怕压坏", "外面纸箱加气泡膜，压不坏的。"),
    ("{code}和{code2}哪个好", "看用途，{code}和{code2}各有长处，您主要什么时候用？"),
    ("{cat}用完怎么收", "用完晾干再装进收纳袋，别压着放。"),
    ("我先看看", "好的，有需要随时喊我～"),
    ("会员怎么开", "关注店铺下单一次就自动成会员了。"),
    ("你们晚上有人吗", "客服早九点到晚十二点都在的。"),
    ("{cat}不合适能退吗", "七天无理由，吊牌和包装完好就能退。"),
    ("退货寄哪里", f"退货寄{RETURN_ADDRESS}，备注订单号就行。"),
    ("买两个能便宜吗", "两件九折，三件八五折。"),
    ("{cat}女生用合适吗", "男女都可以，这款很多女生买。"),
    ("{code}有说明书吗", "包裹里有纸质说明书，详情页也有视频。"),
    ("寄到{city}要几天", "寄{city}一般两三天。"),
    ("怎么查物流", "订单详情里点查看物流就能看到。"),
    ("支持花呗吗", "支持花呗分期，也能用信用卡。"),
    ("{cat}有几个颜色", "有{colours}，现在都有货。"),
    ("你们有实体店吗", "杭州有个门店，线上线下同价。"),
    ("{code}是今年的新款吗", "是的，{code}是今年春天上的。"),
    ("快递到了放哪", "没人的话默认放快递柜，会有短信。"),
    ("可以改收货时间吗", "可以在物流页面和快递员约时间。"),
]
GREETINGS: list[Turn] = [
    ("在吗", "在的亲，您说～"),
    ("你好", "您好，山屿户外，请问有什么可以帮您？"),
    ("在不在", "在呢，请讲"),
    ("客服在吗", "亲，您好，我在的"),
    ("有人吗", "有的，您说"),
    ("hello", "您好～"),
]
CLOSINGS: list[Turn] = [
    ("好的谢谢", "不客气，祝您出行愉快～"),
    ("行，那我等着", "好的，有问题随时找我们。"),
    ("ok", "好嘞～"),
    ("麻烦了", "应该的，感谢支持山屿户外！"),
    ("知道了，辛苦", "不辛苦，祝您生活愉快。"),
    ("好嘞", "有事随时留言哈。"),
]


def _filler(rng: random.Random, used: set[str]) -> Turn:
    """Small talk not yet had today; it names products, colours and places like any fact does."""
    p = rng.choice(PRODUCTS)
    user, shop = rng.choice(
        [t for t in FILLER if t[0] not in used and ("{code2}" not in t[0] or len(BY_CATEGORY[p.category]) > 1)]
    )
    used.add(user)
    cat = CATEGORIES[p.category]
    twins = [o for o in BY_CATEGORY[p.category] if o != p] or [p]
    colours = cat.colours or ("银色",)
    values = {
        "cat": p.category,
        "code": p.code,
        "code2": rng.choice(twins).code,
        "colour": rng.choice(colours),
        "colours": "、".join(colours),
        "city": rng.choice(list(CITIES))[:-1],
    }
    return user.format(**values), shop.format(**values)


def _episode(rng: random.Random, buyer: Buyer, day: date, reserved: set[tuple[str, ...]], left: int) -> Episode | None:
    """One thing the buyer comes about today; what they still have to do comes first near the end."""
    c = _Day(rng, buyer, day, reserved)
    pending = [r for r in REQUIRED if r not in buyer.done]
    names = list(EPISODES)
    weights = [EPISODES[n][1] for n in names]
    if pending and left <= len(pending) + 1:
        weights = [w * (20 if EPISODES[n][2] in pending else 1) for n, w in zip(names, weights, strict=True)]
    for _ in range(16):
        episode = EPISODES[rng.choices(names, weights)[0]][0](c)
        if episode is not None:
            episode.apply(buyer)
            return episode
    return None


def _day(rng: random.Random, buyer: Buyer, day: date, reserved: set[tuple[str, ...]], left: int) -> Session:
    """One buyer's day: a greeting maybe, what they come about, small talk, a closing maybe."""
    planned = rng.choices((1, 2, 3), (35, 45, 20))[0]
    episodes = [e for e in (_episode(rng, buyer, day, reserved, left) for _ in range(planned)) if e]
    blocks: list[tuple[list[Turn], list[Fact]]] = [(e.turns, e.facts) for e in episodes]
    size = sum(len(turns) for turns, _ in blocks)
    wanted = rng.randint(4, 10)
    used: set[str] = set()
    while size < wanted - 1 or size < 3:
        blocks.insert(rng.randint(0, len(blocks)), ([_filler(rng, used)], []))
        size += 1
    if rng.random() < 0.5:
        blocks.insert(0, ([rng.choice(GREETINGS)], []))
    if rng.random() < 0.6 or size < 4:
        blocks.append(([rng.choice(CLOSINGS)], []))
    while sum(len(turns) for turns, _ in blocks) > 10:  # small talk and courtesies go first
        cut = next((i for i, (turns, facts) in enumerate(blocks) if not facts), None)
        if cut is None:
            break
        del blocks[cut]
    start = datetime.combine(
        day,
        time(rng.choice((8, 9, 10, 10, 11, 12, 13, 14, 15, 15, 16, 17, 19, 20, 20, 21, 21, 22)), rng.randint(0, 59)),
        ZONE,
    )
    start = min(start, datetime.combine(day, time(22, 10), ZONE))
    messages: list[ArchivedMessage] = []
    facts: list[Fact] = []
    at = start
    for turns, block_facts in blocks:
        first = len(messages) // 2
        for user, shop in turns:
            messages.append(ArchivedMessage(role="user", text=f"{_label(at, buyer.name)} {user}", at_ms=_ms(at)))
            reply = at + timedelta(seconds=rng.randint(15, 150))
            messages.append(ArchivedMessage(role="assistant", text=shop, at_ms=_ms(reply)))
            at = reply + timedelta(seconds=rng.randint(40, 420))
        for fact in block_facts:
            turn = first + fact.turn
            fact.day = day
            fact.at = datetime.fromtimestamp(messages[2 * turn].at_ms / 1000, ZONE)
            fact.local = {"user": 2 * turn, "shop": 2 * turn + 1}
            facts.append(fact)
    return Session(buyer.name, day, messages, facts)


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def _names(rng: random.Random, count: int) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        given = rng.choice(GIVEN) + (rng.choice(GIVEN) if rng.random() < 0.7 else "")
        name = rng.choice(SURNAMES) + given
        if name not in names:
            names.append(name)
    return names


def _buyer(rng: random.Random, name: str) -> Buyer:
    return Buyer(name, _phone(rng), rng.choice(list(CITIES)), rng.choice(CLOTHES[:4]), str(rng.randint(36, 44)))


def _live(rng: random.Random, buyer: Buyer, days: Sequence[date], reserved: set[tuple[str, ...]]) -> list[Session]:
    return [_day(rng, buyer, day, reserved, len(days) - i) for i, day in enumerate(sorted(days))]


# --- questions ------------------------------------------------------------------------------

# Asked with a day (`{when}`): fact kind -> (template, the answer it asks for).
DATED: dict[str, list[tuple[str, str]]] = {
    "order": [
        ("{when}我拍的那个{cat}，订单号多少来着？", "no"),
        ("帮我查一下{when}那笔{cat}订单的单号", "no"),
        ("{when}下单的{cat}我选的什么颜色？想给朋友买个一样的", "colour"),
        ("{when}买的{cat}我拍的{label}是多少来着", "option"),
        ("{when}在你们家买的{cat}是哪个型号来着？", "code"),
        ("{when}那单{cat}是啥型号，我想再买一个", "code"),
    ],
    "recommend": [
        ("{when}你给我推荐的那个{cat}是哪款来着？", "code"),
        ("{when}跟你聊{cat}，你建议我买哪个型号？", "code"),
        ("{when}问过你{cat}的事，你当时推的哪一款我忘了", "code"),
    ],
    "spec": [
        ("{when}问你的那个{cat}，{aspect}怎么样来着？", "answer"),
        ("{when}你跟我说的{cat}{aspect}，能再说一下吗", "answer"),
        ("{when}咨询{cat}{aspect}的时候你怎么说的来着", "answer"),
    ],
    "logistics": [
        ("{when}你帮我查{cat}物流，说是哪家快递来着？", "courier"),
        ("{when}问{cat}发货的时候你给我的运单号是多少", "track"),
    ],
    "promise": [
        ("{when}我说{cat}有问题，你们最后答应怎么处理的？", "remedy"),
        ("{when}跟你反映{cat}的毛病，你们说怎么解决来着", "remedy"),
    ],
    "exchange": [
        ("{when}我申请换{cat}，你们给我登记换成多大的？", "new"),
        ("{when}{cat}换码那次，换的哪个码来着", "new"),
    ],
    "address": [("{when}我改的收货地址是哪里来着？", "address"), ("{when}给你们的新地址再发我看看", "address")],
    "phone": [("{when}我给你们的新号码是多少来着", "phone"), ("{when}改的那个联系电话是多少", "phone")],
}
# Asked without a day: fact kind -> (question kind, templates).
UNDATED: dict[str, tuple[str, list[str]]] = {
    "recommend": (
        "shop-said",
        [
            "你之前给我推荐过一款{cat}，说适合{need}，是哪款来着？",
            "上回问你{need}用什么{cat}好，你推的是哪个型号？",
            "之前你们客服说有款{cat}特别适合{need}，我想下单了，叫什么来着",
            "{need}那个，你当时建议我买哪个{cat}？",
        ],
    ),
    "spec": (
        "shop-said",
        [
            "你之前跟我说的{cat}{aspect}是怎么样来着？",
            "{cat}的{aspect}你上次告诉过我，再说一遍呗",
            "我问过你们{cat}{aspect}的事，你怎么回答的来着",
        ],
    ),
    "promise": (
        "shop-said",
        [
            "之前{cat}出毛病那次，你们答应给我怎么弄来着？",
            "{cat}坏了那回你们说的补偿是什么，我还没收到",
            "你们上次就{cat}那事给我的承诺是啥来着",
        ],
    ),
    "exchange": (
        "shop-said",
        ["我那个{cat}换码的事，你们备注的换成哪个码？", "之前{cat}不合身要换，你们登记的新尺码是多少"],
    ),
    "address": (
        "changed",
        [
            "{asked}的收货地址，你们那边登记的是哪里？",
            "{asked}给你们的那个地址再跟我核对一下",
            "{asked}，我现在的收货地址是哪个来着",
        ],
    ),
    "phone": ("changed", ["{asked}留给你们的手机号是多少？", "{asked}，现在你们记的联系电话是哪个"]),
    "size": (
        "changed",
        [
            "我的{kind}后来跟你们说改成多大了？",
            "以后给我发{kind}按多大的来着，我之前改过",
            "我之前改过{kind}的尺码，现在是多少",
        ],
    ),
}


def _question(rng: random.Random, fact: Fact, kind: str, period_end: date, last_day: date) -> tuple[str, datetime, str]:
    """The question's text, when it is asked, the answer it asks for."""
    data = fact.data
    if kind in ("date", "relative"):
        options = [(t, a) for t, a in DATED[fact.kind] if a in fact.sides and (a != "colour" or data.get("colour"))]
        template, answer = rng.choice(options)
        if kind == "date":
            asked = fact.day + timedelta(days=rng.randint(1, 40))
            asked = min(asked, max(period_end, fact.day) + timedelta(days=rng.randint(1, 7)))
            when = absolute_day(fact.day, rng) + rng.choice(("", "", "那天", "的时候"))
        else:
            lag = (
                rng.choice((1, 1, 2, 2, 3, 4, 5))
                if rng.random() < 0.65
                else rng.randint(7 - fact.day.weekday(), 13 - fact.day.weekday())
            )
            asked = fact.day + timedelta(days=lag)
            said = relative_day(fact.day, asked, rng, fact.at)
            assert said is not None  # the lags above always have a relative form
            when = said
        text = template.format(when=when, **{k: v for k, v in data.items() if k != "when"})
    elif kind in ("shop-said", "changed"):
        answer = next(iter(fact.sides))
        text = rng.choice(UNDATED[fact.kind][1]).format(**data)
        base = last_day if kind == "changed" else fact.day
        asked = base + timedelta(days=rng.randint(1, 20))
    else:
        answer = "said"
        text = rng.choice(data["asks"].split("\n"))
        asked = fact.day + timedelta(days=rng.randint(1, 30))
    at = datetime.combine(asked, time(rng.randint(8, 22), rng.randint(0, 59)), ZONE)
    return text, at, answer


def _pick_questions(rng: random.Random, sessions: list[Session]) -> list[tuple[Fact, str]]:
    """5–8 (fact, question kind) over all kinds, about distinct facts, answerable: within the
    buyer's own days, what a question names points at one fact."""
    facts = [f for s in sessions for f in s.facts]
    count: dict[tuple[str, ...], int] = {}
    for f in facts:
        count[f.key] = count.get(f.key, 0) + 1
    topics: dict[tuple[date, str], int] = {}
    for f in facts:
        topics[(f.day, f.topic)] = topics.get((f.day, f.topic), 0) + 1
    latest: dict[tuple[str, ...], Fact] = {}
    for f in facts:  # the last change of each kind of thing
        if f.kind in ("address", "phone", "size"):
            latest[(f.kind, f.data.get("kind", ""))] = f
    pools: dict[str, list[Fact]] = {
        "date": [f for f in facts if f.kind in DATED and topics[(f.day, f.topic)] == 1],
        "relative": [f for f in facts if f.kind in DATED and topics[(f.day, f.topic)] == 1],
        "shop-said": [f for f in facts if UNDATED.get(f.kind, ("",))[0] == "shop-said" and count[f.key] == 1],
        "user-said": [f for f in facts if f.kind in ("personal", "preference") and count[f.key] == 1],
        "changed": [f for f in latest.values() if count[f.key] == 1],
    }
    wanted = rng.randint(5, 8)
    kinds = [k for k in pools if pools[k]]
    extra = ["date", "relative", "shop-said", "user-said", "date", "relative"]
    rng.shuffle(extra)
    chosen: list[tuple[Fact, str]] = []
    used: set[int] = set()
    for kind in kinds + extra:
        if len(chosen) >= wanted:
            break
        options = [f for f in pools[kind] if id(f) not in used]
        if options:
            fact = rng.choice(options)
            used.add(id(fact))
            chosen.append((fact, kind))
    return chosen


def generate(rng: random.Random, days: int = 8, distractor_days: int = 140) -> Dialogue:
    """One shop store: the target buyer's `days` days among `distractor_days` days of 15–25
    other buyers over two to three months, in time order; the questions are the target's."""
    start = date(2024, 1, 8) + timedelta(days=rng.randint(0, 600))
    period = rng.randint(60, 90)
    period_end = start + timedelta(days=period - 1)
    names = _names(rng, 1 + rng.randint(15, 25))
    target = _buyer(rng, names[0])
    target_days = sorted(start + timedelta(days=d) for d in rng.sample(range(period), days))
    sessions = _live(rng, target, target_days, set())
    picked = _pick_questions(rng, sessions)
    reserved: set[tuple[str, ...]] = set()
    for fact, kind in picked:
        reserved.add(("on", fact.day.isoformat(), fact.topic) if kind in ("date", "relative") else fact.key)
    others = [_buyer(rng, name) for name in names[1:]]
    weights = [rng.uniform(0.3, 2.0) for _ in others]
    calendar: dict[int, set[date]] = {i: set() for i in range(len(others))}
    for _ in range(distractor_days):
        for _ in range(20):  # a day the buyer has not talked on yet
            i = rng.choices(range(len(others)), weights)[0]
            day = start + timedelta(days=rng.randrange(period))
            if day not in calendar[i]:
                calendar[i].add(day)
                break
    for i, buyer in enumerate(others):
        sessions += _live(rng, buyer, sorted(calendar[i]), reserved)
    sessions.sort(key=lambda s: (s.messages[0].at_ms, s.buyer))
    dialogue = Dialogue(sessions=[s.messages for s in sessions])
    offset = 0
    for session in sessions:
        for fact in session.facts:
            fact.offset = offset
        offset += len(session.messages)
    for fact, kind in picked:
        text, at, answer = _question(rng, fact, kind, period_end, target_days[-1])
        evidence = sorted(fact.offset + fact.local[side] for side in fact.sides[answer])
        dialogue.questions.append(Question(text, evidence, kind, _ms(at)))
    return dialogue
