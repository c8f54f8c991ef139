"""Generate a tiny random-weight Llama model that the vLLM CPU build can serve.

    .venv-vllm/bin/python scripts/make_tiny_model.py var/models/tiny
    .venv-vllm/bin/python scripts/make_tiny_model.py --draft var/models/tiny-draft

Writes config.json, generation_config.json, model.safetensors, tokenizer.json and
tokenizer_config.json (with a chat template) into the output directory. Nothing is
downloaded: the weights are seeded random numbers and the byte-level BPE tokenizer is
trained on the small corpus below. The output is deterministic for a given seed, and a
run is skipped when the directory already holds the output of this same script version
(stamp file .tiny-model.json, keyed by the script's own hash, the seed and the variant).

--draft writes an even smaller model with the identical tokenizer and vocabulary, for
speculative-decoding tests (--speculative-config '{"method": "draft_model", ...}').

Needs numpy, torch, safetensors and tokenizers (all installed in .venv-vllm by `make vllm-env`).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

STAMP = ".tiny-model.json"
FORMAT_VERSION = 1

# head_dim must be one the CPU attention backend supports (32, 64, 80, ...); 16 is rejected.
VARIANTS = {
    "main": {"hidden_size": 128, "num_attention_heads": 2, "num_hidden_layers": 2, "intermediate_size": 256},
    "draft": {"hidden_size": 64, "num_attention_heads": 1, "num_hidden_layers": 1, "intermediate_size": 128},
}
HEAD_DIM = 64
MAX_POSITIONS = 2048
VOCAB_TARGET = 4096

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
ROLE_TOKENS = ["<|system|>", "<|user|>", "<|assistant|>"]
SPECIAL_TOKENS = [PAD, BOS, EOS, *ROLE_TOKENS]  # ids 0..5, in this order

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}\n{% endif %}"
)

EN_SENTENCES = [
    "Hello, how can I help you today?",
    "Thank you for contacting customer support.",
    "I am sorry to hear that your order has not arrived yet.",
    "Could you please share your order number with me?",
    "Your refund has been processed and should appear within five business days.",
    "Please restart the application and try again.",
    "I have escalated your request to our technical team.",
    "Is there anything else I can help you with?",
    "Your subscription will renew automatically at the end of the month.",
    "You can change your password from the account settings page.",
    "The package was shipped yesterday and the tracking number is in your email.",
    "We apologize for the inconvenience and appreciate your patience.",
    "I would like to cancel my subscription.",
    "My invoice shows the wrong amount.",
    "The app crashes every time I open the settings.",
    "When will my replacement be delivered?",
    "Can I upgrade my plan without losing my data?",
    "I was charged twice for the same order.",
    "How do I reset my password?",
    "The delivery address needs to be updated.",
    "Our support team is available twenty four hours a day, seven days a week.",
    "Have a great day and thank you for choosing our service.",
    "Please verify your identity by entering the code we just sent to your phone.",
    "Your account has been temporarily locked after several failed login attempts.",
    "We have received your complaint and a specialist will call you back within two hours.",
    "The promotion code expired last Friday, but I can offer you a discount voucher instead.",
    "Unfortunately, international shipping is not available for this product.",
    "You will receive a confirmation message once the payment is completed.",
    "Our warehouse is experiencing delays because of the holiday season.",
    "I understand your frustration, and I will do my best to resolve this quickly.",
    "Please attach a photo of the damaged item so that we can process the claim.",
    "The technician will visit your home between nine and eleven in the morning.",
    "Would you prefer a full refund or an exchange for a different size?",
    "Our privacy policy explains how we store and protect your personal information.",
    "The billing cycle starts on the first day of every month.",
    "Make sure the device is connected to a stable wireless network.",
    "Try clearing the browser cache and cookies, then sign in again.",
    "Your feedback helps us improve our products and services.",
    "The latest firmware update fixes the battery drain problem.",
    "We are unable to locate an order with that reference number.",
    "Express delivery costs an additional fee but arrives the next business day.",
    "Please keep the original packaging until the return is approved.",
    "I can transfer you to the billing department right now.",
    "Could you describe the error message that appears on the screen?",
    "The store opens at eight o'clock on weekdays and ten o'clock on weekends.",
    "Loyalty points can be redeemed at checkout for future purchases.",
    "The courier attempted delivery but nobody was available to sign for the parcel.",
    "Customers in premium membership enjoy free shipping and priority support.",
]
EN_TEMPLATES = [
    "My {item} stopped working after {time}.",
    "Can you check the status of my {item} order?",
    "I want to return the {item} I bought {time}.",
    "The {item} I received is damaged, please send a new one.",
    "Is the {item} still covered by the warranty after {time}?",
]
EN_ITEMS = ["phone", "laptop", "headphones", "router", "printer", "camera", "keyboard", "monitor", "charger", "tablet"]
EN_TIMES = ["two days", "one week", "last month", "three months", "yesterday", "a year"]

ZH_SENTENCES = [
    "您好，请问有什么可以帮您？",
    "感谢您联系客服中心。",
    "很抱歉您的订单还没有送达。",
    "请提供您的订单号，我帮您查询一下。",
    "您的退款已经处理，预计五个工作日内到账。",
    "请重新启动应用后再试一次。",
    "我已经把您的问题转交给技术团队。",
    "请问还有其他可以帮您的吗？",
    "您的会员将在月底自动续费。",
    "您可以在账户设置页面修改密码。",
    "包裹昨天已经发出，物流单号已发送到您的邮箱。",
    "给您带来不便，我们深表歉意，感谢您的耐心等待。",
    "我想取消我的订阅。",
    "我的发票金额不对。",
    "每次打开设置应用就会崩溃。",
    "我的换货什么时候能送到？",
    "升级套餐会不会丢失数据？",
    "同一个订单被扣了两次款。",
    "怎么重置密码？",
    "我需要修改收货地址。",
    "我们的客服团队全天二十四小时为您服务。",
    "祝您生活愉快，感谢您选择我们的服务。",
    "请输入我们刚刚发送到您手机上的验证码来确认身份。",
    "由于多次登录失败，您的账户已被暂时锁定。",
    "我们已收到您的投诉，专员会在两小时内给您回电。",
    "优惠码上周五已经过期，不过我可以为您提供一张折扣券。",
    "很遗憾，这件商品暂不支持国际配送。",
    "付款完成后您会收到一条确认短信。",
    "由于节假日期间订单量较大，仓库发货会有所延迟。",
    "非常理解您的心情，我会尽快为您解决这个问题。",
    "请上传破损商品的照片，以便我们处理理赔申请。",
    "维修师傅会在上午九点到十一点之间上门服务。",
    "您希望全额退款还是更换其他尺码？",
    "我们的隐私政策说明了如何存储和保护您的个人信息。",
    "账单周期从每月第一天开始计算。",
    "请确认设备已经连接到稳定的无线网络。",
    "请清除浏览器缓存和饼干数据，然后重新登录。",
    "您的意见和建议能帮助我们改进产品与服务。",
    "最新的固件更新修复了电池耗电过快的问题。",
    "系统中没有找到这个编号对应的订单。",
    "加急快递需要额外付费，但第二个工作日就能送达。",
    "退货审核通过之前，请保留商品的原包装。",
    "我现在就可以为您转接到账务部门。",
    "能描述一下屏幕上出现的错误提示吗？",
    "门店工作日早上八点开门，周末早上十点开门。",
    "积分可以在结账时抵扣，用于以后的购物。",
    "快递员上门派送时无人签收，包裹已退回网点。",
    "高级会员享受免运费和优先客服支持。",
    "春节期间物流停运，节后将按下单顺序陆续发货。",
    "发票抬头和税号填写错误可以申请重新开具。",
    "麻烦您核对一下收件人姓名、电话和详细地址。",
]
ZH_TEMPLATES = [
    "我的{item}用了{time}就坏了。",
    "请帮我查一下{item}订单的状态。",
    "我想退掉{time}买的{item}。",
    "收到的{item}有损坏，请给我换一个新的。",
    "{item}用了{time}还在保修期内吗？",
]
ZH_ITEMS = ["手机", "笔记本电脑", "耳机", "路由器", "打印机", "相机", "键盘", "显示器", "充电器", "平板电脑"]
ZH_TIMES = ["两天", "一个星期", "上个月", "三个月", "昨天", "一年"]


def corpus() -> list[str]:
    lines = list(EN_SENTENCES) + list(ZH_SENTENCES)
    for template in EN_TEMPLATES:
        lines += [template.format(item=i, time=t) for i in EN_ITEMS for t in EN_TIMES]
    for template in ZH_TEMPLATES:
        lines += [template.format(item=i, time=t) for i in ZH_ITEMS for t in ZH_TIMES]
    return lines


def train_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    for index, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == index, (token, tokenizer.token_to_id(token))
    bos_id = tokenizer.token_to_id(BOS)
    # Plain prompts (/v1/completions) get a BOS; chat prompts carry it in the template and are
    # tokenized without special tokens.
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
    )
    return tokenizer


def tokenizer_config() -> dict:
    added = {
        str(index): {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for index, token in enumerate(SPECIAL_TOKENS)
    }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "additional_special_tokens": ROLE_TOKENS,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "padding_side": "left",
        "chat_template": CHAT_TEMPLATE,
    }


def model_config(variant: str, vocab_size: int) -> dict:
    shape = VARIANTS[variant]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": SPECIAL_TOKENS.index(BOS),
        "eos_token_id": SPECIAL_TOKENS.index(EOS),
        "pad_token_id": SPECIAL_TOKENS.index(PAD),
        "dtype": "bfloat16",
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": shape["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": shape["intermediate_size"],
        "max_position_embeddings": MAX_POSITIONS,
        "mlp_bias": False,
        "num_attention_heads": shape["num_attention_heads"],
        "num_hidden_layers": shape["num_hidden_layers"],
        "num_key_value_heads": shape["num_attention_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": vocab_size,
    }


def generation_config() -> dict:
    return {
        "bos_token_id": SPECIAL_TOKENS.index(BOS),
        "eos_token_id": SPECIAL_TOKENS.index(EOS),
        "pad_token_id": SPECIAL_TOKENS.index(PAD),
        "do_sample": False,
    }


def random_weights(config: dict, seed: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(seed)
    std = config["initializer_range"]
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    q_dim = config["num_attention_heads"] * HEAD_DIM
    kv_dim = config["num_key_value_heads"] * HEAD_DIM

    def normal(*shape):
        return rng.normal(0.0, std, size=shape).astype(np.float32)

    def ones(n):
        return np.ones((n,), dtype=np.float32)

    tensors = {"model.embed_tokens.weight": normal(vocab, hidden)}
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}"
        tensors[f"{prefix}.self_attn.q_proj.weight"] = normal(q_dim, hidden)
        tensors[f"{prefix}.self_attn.k_proj.weight"] = normal(kv_dim, hidden)
        tensors[f"{prefix}.self_attn.v_proj.weight"] = normal(kv_dim, hidden)
        tensors[f"{prefix}.self_attn.o_proj.weight"] = normal(hidden, q_dim)
        tensors[f"{prefix}.mlp.gate_proj.weight"] = normal(inter, hidden)
        tensors[f"{prefix}.mlp.up_proj.weight"] = normal(inter, hidden)
        tensors[f"{prefix}.mlp.down_proj.weight"] = normal(hidden, inter)
        tensors[f"{prefix}.input_layernorm.weight"] = ones(hidden)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = ones(hidden)
    tensors["model.norm.weight"] = ones(hidden)
    tensors["lm_head.weight"] = normal(vocab, hidden)
    return tensors


def script_hash() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def wanted_stamp(variant: str, seed: int) -> dict:
    return {"format": FORMAT_VERSION, "script_sha256": script_hash(), "variant": variant, "seed": seed}


def read_stamp(out_dir: Path) -> dict | None:
    try:
        return json.loads((out_dir / STAMP).read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def build(out_dir: Path, variant: str, seed: int) -> Path:
    """Write the model into a sibling temporary directory, then move it into place."""
    import torch
    from safetensors.torch import save_file

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        tokenizer = train_tokenizer()
        tokenizer.save(str(tmp / "tokenizer.json"))
        write_json(tmp / "tokenizer_config.json", tokenizer_config())
        config = model_config(variant, tokenizer.get_vocab_size())
        write_json(tmp / "config.json", config)
        write_json(tmp / "generation_config.json", generation_config())
        # bfloat16 is what vLLM's CPU backend runs (it downcasts float32 checkpoints, warning per tensor).
        arrays = random_weights(config, seed)
        weights = {name: torch.from_numpy(array).to(torch.bfloat16) for name, array in arrays.items()}
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        stamp = wanted_stamp(variant, seed)
        stamp["tokenizer_sha256"] = hashlib.sha256((tmp / "tokenizer.json").read_bytes()).hexdigest()
        stamp["vocab_size"] = config["vocab_size"]
        write_json(tmp / STAMP, stamp)
        for path in tmp.iterdir():  # mkdtemp and save_file create owner-only modes
            path.chmod(0o644)
        tmp.chmod(0o755)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out_dir


def ensure_model(out_dir: str | os.PathLike, *, draft: bool = False, seed: int = 0, force: bool = False) -> bool:
    """Make sure out_dir holds this script's model; return True when it was (re)generated."""
    out = Path(out_dir)
    variant = "draft" if draft else "main"
    out.parent.mkdir(parents=True, exist_ok=True)
    # Concurrent test sessions may ask for the same directory: one builds, the others wait and reuse it.
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = read_stamp(out)
        if not force and stamp is not None and all(stamp.get(k) == v for k, v in wanted_stamp(variant, seed).items()):
            return False
        if out.exists() and stamp is None and any(out.iterdir()):
            raise SystemExit(f"{out} is not empty and was not made by this script; refusing to overwrite it")
        build(out, variant, seed)
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="directory to write the model into")
    parser.add_argument("--draft", action="store_true", help="the smaller draft model (same tokenizer)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    parser.add_argument("--force", action="store_true", help="regenerate even when up to date")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    made = ensure_model(args.out_dir, draft=args.draft, seed=args.seed, force=args.force)
    print(f"{'generated' if made else 'up to date'}: {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
