"""PyTorch side of the 1B Llama speed comparison: transformers' LlamaForCausalLM in the
shape of examples/llama3.2-1b-1gpu.tp (random init), bf16 autocast over fp32 weights,
fused AdamW, eager with SDPA attention. Prints step time, tokens/s and model TFLOP/s."""
import argparse, time, torch, torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM
p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=4); p.add_argument("--seq", type=int, default=2048)
p.add_argument("--steps", type=int, default=12); p.add_argument("--attn", default="sdpa")
a = p.parse_args()
cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                  num_hidden_layers=16, vocab_size=128256, max_position_embeddings=a.seq, rope_theta=500000.0,
                  tie_word_embeddings=True, attn_implementation=a.attn)
m = LlamaForCausalLM(cfg).cuda()
n = sum(p.numel() for p in m.parameters())
opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
x = torch.randint(0, 128256, (a.batch, a.seq + 1), device="cuda")
times = []
torch.cuda.reset_peak_memory_stats()
for i in range(a.steps):
    torch.cuda.synchronize(); t0 = time.time()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = m(input_ids=x[:, :-1]).logits
    loss = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), x[:, 1:].reshape(-1))
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); times.append(time.time() - t0)
t = sorted(times[2:])[len(times[2:]) // 2]
tok = a.batch * a.seq
L, h, s = 16, 2048, a.seq
flops = 6 * n * tok + 12 * L * h * s * tok  # 6N + attention, per step
print(f"torch llama-1b {a.attn}: params {n/1e6:.1f}M step {t*1e3:.1f} ms, {tok/t:.0f} tokens/s, "
      f"{flops/t/1e12:.1f} TFLOP/s (6N+12Lhs), peak {torch.cuda.max_memory_allocated()/2**30:.2f} GiB")
