"""Expands the hand-written templates in intent_templates.txt into intents.jsonl, deterministically.

Run from the repository root: `python -m engine_node.policy.data.build_intents`. The same templates and seed always
give the same file, so a change to the dataset is a reviewable diff of the templates.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from engine_node.policy.dataset import LABELS, load_held_out
from engine_node.policy.intent import grams
from engine_node.policy.intent_quality import NEAR_DUPLICATE_JACCARD

HERE = Path(__file__).resolve().parent
TEMPLATES_PATH = HERE / "intent_templates.txt"
OUTPUT_PATH = HERE / "intents.jsonl"
SEED = 20261111
LANGS = ("zh", "en", "mixed")
# Each label gets at least this many messages; templates with few free choices stop early when they run dry.
TARGET_PER_LABEL = 2400
ATTEMPTS_PER_VARIANT = 25

SLOTS: dict[str, tuple[str, ...]] = {
    "prod": (
        "手机",
        "羽绒服",
        "扫地机器人",
        "口红",
        "奶粉",
        "耳机",
        "空气炸锅",
        "面霜",
        "运动鞋",
        "笔记本电脑",
        "电饭煲",
        "卫衣",
        "猫粮",
        "纸尿裤",
        "平板",
        "行李箱",
        "洗面奶",
        "投影仪",
        "电动牙刷",
        "大衣",
    ),
    "prodE": (
        "phone",
        "down jacket",
        "robot vacuum",
        "lipstick",
        "headphones",
        "air fryer",
        "face cream",
        "sneakers",
        "laptop",
        "rice cooker",
        "hoodie",
        "tablet",
        "suitcase",
        "electric toothbrush",
        "coffee maker",
        "smartwatch",
    ),
    "brand": ("小米", "苹果", "华为", "戴森", "雅诗兰黛", "耐克", "兰蔻", "索尼", "美的", "安踏"),
    "brandE": ("Apple", "Samsung", "Dyson", "Sony", "Nike", "Xiaomi", "Lancome", "Bose", "Philips", "Adidas"),
    "courier": ("顺丰", "中通", "圆通", "京东快递", "韵达", "邮政", "极兔", "申通"),
    "courierE": ("SF Express", "DHL", "FedEx", "UPS", "the courier", "USPS", "Cainiao"),
    "days": ("三天", "3天", "一个星期", "五天", "两天", "好几天", "10天", "半个月"),
    "daysE": ("3 days", "a week", "five days", "two weeks", "10 days", "ages"),
    "fest": ("双十一", "双11", "618", "大促", "这次活动", "双12", "年货节"),
    "festE": ("Double 11", "11.11", "618", "the big sale", "Singles' Day", "Black Friday"),
    "date": ("11月11号", "昨天", "前天", "上周五", "11.1", "6月18日", "上个月"),
    "dateE": ("Nov 11", "yesterday", "last Friday", "the 1st", "June 18", "last week"),
    "city": ("上海", "北京", "广州", "杭州", "成都", "武汉", "深圳", "乌鲁木齐", "哈尔滨"),
    "cityE": ("London", "New York", "Toronto", "Sydney", "Berlin", "Singapore", "Shanghai"),
    "who": ("妈妈", "男朋友", "老婆", "女朋友", "老公", "爸爸", "闺蜜", "同事", "孩子"),
    "whoE": ("mom", "boyfriend", "wife", "girlfriend", "husband", "dad", "best friend", "coworker", "kid"),
    "bank": ("招行卡", "建行卡", "信用卡", "花呗", "微信支付", "支付宝", "银行卡", "云闪付"),
    "bankE": ("Visa card", "PayPal", "Apple Pay", "credit card", "debit card", "Mastercard", "Alipay"),
    "coupon": ("满300减50的券", "跨店满减券", "店铺券", "88VIP券", "红包", "优惠券", "新人券", "品类券"),
    "couponE": ("store coupon", "welcome voucher", "$10 off coupon", "free shipping voucher", "gift card"),
    "emoji": ("😡", "😭", "🙏", "😊", "👍", "😤", "🤔", "💢", "😂", "🥺", "❤️", "🔥"),
    "n": ("2", "3", "4", "5", "6"),
    # Everyday goods beyond electronics, what breaks in transit, and who or what a product has to suit.
    "thing": (
        "杯子",
        "花瓶",
        "台灯",
        "连衣裙",
        "牛仔裤",
        "床单",
        "保温杯",
        "茶具",
        "镜子",
        "碗",
        "玩具",
        "靴子",
        "水壶",
    ),
    "thingE": (
        "cup",
        "teapot",
        "desk lamp",
        "dress",
        "pair of jeans",
        "duvet cover",
        "water bottle",
        "plate set",
        "picture frame",
        "blender",
        "kettle",
        "sofa cushion",
        "toy car",
        "backpack",
        "moisturiser",
        "sunscreen",
        "phone case",
        "charging cable",
    ),
    "damage": ("碎了", "裂了", "压扁了", "漏了", "划花了", "坏的", "变形了", "破了", "摔坏了", "断了"),
    "damageE": ("cracked", "smashed", "dented", "scratched", "torn", "leaking", "bent", "broken", "shattered"),
    "skin": ("湿疹", "敏感肌", "干皮", "混油皮", "孕妇", "哺乳期", "过敏体质", "玫瑰痤疮", "宝宝", "老人"),
    "skinE": (
        "eczema",
        "very dry skin",
        "acne",
        "rosacea",
        "psoriasis",
        "a nut allergy",
        "pregnant women",
        "sensitive skin",
        "combination skin",
    ),
    "device": (
        "iPhone 14",
        "华为Mate 60",
        "小米14",
        "MacBook Air",
        "iPad",
        "安卓手机",
        "荣耀手机",
        "Switch",
        "联想笔记本",
    ),
    "deviceE": (
        "iPhone 12",
        "Galaxy S23",
        "MacBook Pro",
        "Pixel 8",
        "iPad Air",
        "Nintendo Switch",
        "PS5",
        "ThinkPad",
        "Kindle",
    ),
    "use": ("出差", "跑步", "露营", "宿舍用", "小户型", "新手", "送礼", "办公", "开车", "健身"),
    "useE": (
        "hiking",
        "a small kitchen",
        "daily commuting",
        "a dorm room",
        "long flights",
        "home workouts",
        "a beginner",
        "outdoor use",
        "a rental flat",
    ),
    "age": ("一岁宝宝", "三岁小孩", "十岁的孩子", "七十岁的老人", "初中生"),
    "ageE": ("toddler", "five year old", "teenager", "newborn", "80 year old"),
}
GENERATED_SLOTS = ("order", "amount", "amountE", "budget", "budgetE", "code", "phone")

PREFIXES = {
    "zh": ("", "", "", "亲，", "在吗？", "你好，", "客服，", "急！", "请问", "麻烦问下，", "喂，", "您好，"),
    "en": ("", "", "", "hi, ", "Hello! ", "hey ", "pls ", "URGENT: ", "excuse me, ", "Hi team, ", "quick question: "),
}
SUFFIXES = {
    "zh": ("", "", "", "？", "??", "！！", "。", " 谢谢", "，谢谢啦", "…", "，急", "，在线等", "啊啊啊"),
    "en": ("", "", "", "?", "!!", " thanks", " thx", "...", " asap", " please", " ty"),
}
# Sentences that carry no intent of their own, around the request: long, rambling messages from real customers
# surround what they want with background and sign-offs the model has to learn to look past.
LEADS = {
    "zh": (
        "不好意思打扰一下，",
        "我是你们家老顾客了，",
        "第一次在这里买东西，",
        "帮我妈问一下，",
        "问题有点多，慢慢说，",
        "之前问过一次没人回，",
        "是这样的，",
        "我平时很少网购，不太懂，",
        "我在外地出差，用手机打字不方便，",
    ),
    "en": (
        "Sorry to bother you again. ",
        "I've been shopping here for a couple of years and never had an issue before. ",
        "Long story short, ",
        "So, a bit of background first. ",
        "My English is not so good, sorry. ",
        "I looked in the help center but couldn't find an answer. ",
        "Writing on behalf of my mother, she's not great with computers. ",
        "ok so ",
        "First time ordering from you. ",
        "I tried calling but the line was busy. ",
    ),
}
TAILS = {
    "zh": (
        "麻烦尽快回复，谢谢",
        "等你们消息",
        "辛苦了",
        "我明天要出门，今天能回复吗",
        "先谢谢了",
        "有结果了告诉我一声",
    ),
    "en": (
        " Looking forward to your reply.",
        " Thanks in advance.",
        " Please get back to me soon, I'm travelling next week.",
        " Regards, Sam",
        " I'd appreciate a quick answer.",
        " Thanks and have a good one",
        " Cheers",
    ),
}
# Common slips in Chinese typing: homophones, wrong characters picked from the IME list, colloquial forms.
ZH_TYPOS = (
    ("优惠券", "优惠卷"),
    ("怎么", "咋"),
    ("什么", "啥"),
    ("账号", "帐号"),
    ("在", "再"),
    ("吗", "嘛"),
    ("的", "滴"),
    ("退款", "退宽"),
    ("快递", "快的"),
    ("没有", "木有"),
    ("已经", "以经"),
    ("收到", "收倒"),
)


def generated(slot: str, rng: random.Random) -> str:
    """A fresh value for a slot whose values are numbers or codes rather than a fixed list."""
    if slot == "order":
        return str(rng.randrange(10**15, 10**19))
    if slot in ("amount", "budget"):
        value = rng.choice((9.9, 29, 59, 99, 128, 199, 299, 399, 599, 1299, 2999, 5000, 86.5))
        unit = rng.choice(("¥{}", "{}元", "{}块", "￥{}", "{}块钱"))
        return unit.format(f"{value:g}")
    if slot in ("amountE", "budgetE"):
        value = rng.choice((9.99, 25, 49, 80, 120, 199, 300, 500, 1000))
        return rng.choice(("${}", "{} dollars", "USD {}", "${} ")).format(f"{value:g}").strip()
    if slot == "code":
        return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(rng.choice((6, 8))))
    if slot == "phone":
        return f"1{rng.choice('3456789')}{rng.randrange(10)}****{rng.randrange(10000):04d}"
    raise KeyError(slot)


def read_templates(path: Path = TEMPLATES_PATH) -> list[tuple[str, str, str, str]]:
    """(template id, label, lang, template) for every template line, ids numbered within their section."""
    rows: list[tuple[str, str, str, str]] = []
    label = lang = ""
    counts: dict[tuple[str, str], int] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        header = re.fullmatch(r"\[(\w+) (\w+)\]", line)
        if header:
            label, lang = header.groups()
            if label not in LABELS or lang not in LANGS:
                raise ValueError(f"unknown section {line}")
            continue
        counts[(label, lang)] = index = counts.get((label, lang), 0) + 1
        rows.append((f"{label}/{lang}/{index:02d}", label, lang, line))
    return rows


def expand(template: str, rng: random.Random) -> str:
    """One filling of a template: each {a|b} picks a phrasing, each {slot} a value."""

    def fill(match: re.Match[str]) -> str:
        body = match.group(1)
        if "|" in body or body == "":
            return rng.choice(body.split("|"))
        if body in GENERATED_SLOTS:
            return generated(body, rng)
        return rng.choice(SLOTS[body])

    return re.sub(r"\{([^{}]*)\}", fill, template)


def english_typo(text: str, rng: random.Random) -> str:
    """Drops, doubles or swaps one letter of one word, as fast thumbs do."""
    words = text.split(" ")
    candidates = [i for i, word in enumerate(words) if len(word) > 3 and word.isalpha()]
    if not candidates:
        return text
    i = rng.choice(candidates)
    word, j = words[i], rng.randrange(1, len(words[i]) - 1)
    kind = rng.randrange(3)
    if kind == 0:
        word = word[:j] + word[j + 1 :]
    elif kind == 1:
        word = word[:j] + word[j] + word[j:]
    else:
        word = word[: j - 1] + word[j] + word[j - 1] + word[j + 1 :]
    words[i] = word
    return " ".join(words)


def decorate(text: str, lang: str, rng: random.Random) -> str:
    """Adds the greetings, punctuation, emojis, case and typos that real chat messages carry."""
    style = "en" if lang == "en" or (lang == "mixed" and rng.random() < 0.3) else "zh"
    if rng.random() < 0.25:
        for right, wrong in rng.sample(ZH_TYPOS, 3):
            if right in text:
                text = text.replace(right, wrong, 1)
                break
    if lang != "zh" and rng.random() < 0.25:
        text = english_typo(text, rng)
        if rng.random() < 0.3:
            text = english_typo(text, rng)
    if lang != "zh" and rng.random() < 0.3:
        text = text.lower()
    text = rng.choice(PREFIXES[style]) + text + rng.choice(SUFFIXES[style])
    if rng.random() < 0.15:
        text += rng.choice(SLOTS["emoji"]) * rng.choice((1, 1, 2, 3))
    if rng.random() < 0.15:
        text = rng.choice(LEADS[style]) + text
    if rng.random() < 0.1:
        text += rng.choice(TAILS[style])
    return text.strip()


class HeldOutGuard:
    """Refuses a generated message that nearly repeats a message of the separately written held-out set.

    The held-out set is written apart from the templates; a filling that happens to land on one of its messages
    (same n-grams, see intent_quality.NEAR_DUPLICATE_JACCARD) would make the held-out figure a training figure.
    """

    def __init__(self, texts: list[str]):
        self.grams = [grams(text) for text in texts]
        self.index: dict[str, list[int]] = {}
        for i, found in enumerate(self.grams):
            for gram in found:
                self.index.setdefault(gram, []).append(i)

    def near(self, text: str) -> bool:
        mine = grams(text)
        shared: dict[int, int] = {}
        for gram in mine:
            for i in self.index.get(gram, ()):
                shared[i] = shared.get(i, 0) + 1
        return any(
            count / (len(mine) + len(self.grams[i]) - count) >= NEAR_DUPLICATE_JACCARD for i, count in shared.items()
        )


def build(seed: int = SEED) -> list[dict[str, str]]:
    """Every example, in template order: round-robin over a label's templates until the label has enough."""
    rng = random.Random(seed)
    templates = read_templates()
    guard = HeldOutGuard([message.text for message in load_held_out()])
    seen: set[str] = set()
    examples: list[dict[str, str]] = []
    for label in LABELS:
        mine = [row for row in templates if row[1] == label]
        dry: set[str] = set()
        count = 0
        while count < TARGET_PER_LABEL and len(dry) < len(mine):
            for template_id, _, lang, template in mine:
                if template_id in dry or count >= TARGET_PER_LABEL:
                    continue
                for _ in range(ATTEMPTS_PER_VARIANT):
                    text = decorate(expand(template, rng), lang, rng)
                    if text not in seen and not guard.near(text):
                        seen.add(text)
                        examples.append({"text": text, "label": label, "lang": lang, "template": template_id})
                        count += 1
                        break
                else:
                    dry.add(template_id)
    return examples


def main() -> None:
    examples = build()
    with OUTPUT_PATH.open("w", encoding="utf-8") as out:
        for example in examples:
            out.write(json.dumps(example, ensure_ascii=False) + "\n")
    templates = read_templates()
    print(f"{len(examples)} examples from {len(templates)} templates -> {OUTPUT_PATH}")
    for label in LABELS:
        counts = {lang: sum(1 for e in examples if e["label"] == label and e["lang"] == lang) for lang in LANGS}
        n_templates = sum(1 for row in templates if row[1] == label)
        print(f"  {label:24s} {sum(counts.values()):4d}  {counts}  templates={n_templates}")


if __name__ == "__main__":
    main()
