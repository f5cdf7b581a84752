"""Merges bench_indexer and peers.py output (JSON lines) into the markdown table of
docs/performance.md's "Indexer and top-k" section."""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def hopper_cells(r, copy):
    """hopper.indexer's logits time and GB/s (% of copy), or dashes where it was not run."""
    if r.get("hopper_logits_us", 0) <= 0:
        return "- | -"
    return f"{r['hopper_logits_us']:.1f} | {r['hopper_logits_gbs']:.0f} ({100.0 * r['hopper_logits_gbs'] / copy:.0f}%)"


def hopper_topk_cells(r):
    """hopper.indexer's unfused and fused top-k times, fused / unfused, and the speedup of its
    faster path over cuda.indexer's faster path; dashes where it was not run."""
    if r.get("hopper_topk_us", 0) <= 0:
        return "- | - | - | -"
    best = min(r["unfused_us"], r["fused_us"])
    hu, hf = r["hopper_topk_us"], r.get("hopper_fused_us", 0)
    if hf <= 0:
        return f"{hu:.1f} | - | - | {best / hu:.2f}x"
    return f"{hu:.1f} | {hf:.1f} | {hf / hu:.2f} | {best / min(hu, hf):.2f}x"


def main():
    ours = load(sys.argv[1])
    peers = load(sys.argv[2])
    copy = next(r for r in ours if r["kind"] == "copy")["gbs"]
    torch_copy = next((r["gbs"] for r in peers if r["kind"] == "torch_copy"), float("nan"))
    topk_peer = {(r["rows"], r["n"]): r["us"] for r in peers if r["kind"] == "torch_topk"}
    print(f"Copy bandwidth (1 GiB D2D, read + write): {copy:.0f} GB/s (torch copy_: {torch_copy:.0f} GB/s)\n")
    rt = next(r for r in ours if r["kind"] == "rows_topk")
    print("Times: calls queued back to back between two events, per call; \"sync\": median of calls "
          "timed alone, host launch work included; unfused and fused top-k: the median of 6 blocks "
          "of 10 calls each, the two paths alternating (clock drift cancels).\n")
    print("| top-k alone | latte | latte sync | torch.topk | target |\n|---|---|---|---|---|")
    print(f"| 2048 of 131072, 8 rows | {rt['us']:.1f} us | {rt.get('sync_us', float('nan')):.1f} us | "
          f"{topk_peer.get((8, 131072), float('nan')):.1f} us | <= 30 us |\n")
    print("| H_i | B | context | logits us | GB/s (% copy) | hopper.indexer logits us | GB/s (% copy) | "
          "logits sync us | unfused top-k us | fused top-k us | fused / unfused | auto | "
          "hopper.indexer unfused top-k us | hopper.indexer fused top-k us | hopper fused / unfused | "
          "hopper's faster vs cuda.indexer's faster | top-k of logits us | torch.topk us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    slower_at_128k = []
    hopper_slower_at_128k = []
    shapes_at_128k = 0
    for r in ours:
        if r["kind"] != "decode":
            continue
        pct = 100.0 * r["logits_gbs"] / copy
        peer = topk_peer.get((r["B"], r["ctx"]), float("nan"))
        ratio = r["fused_us"] / r["unfused_us"] if r["unfused_us"] > 0 else float("nan")
        if r["ctx"] >= 131072:
            shapes_at_128k += 1
            if not ratio < 1.0:
                slower_at_128k.append(f"H_i {r['H']} B {r['B']} ({ratio:.2f})")
            if r.get("hopper_fused_us", 0) > 0:
                hr = r["hopper_fused_us"] / r["hopper_topk_us"]
                if not hr < 1.0:
                    hopper_slower_at_128k.append(f"H_i {r['H']} B {r['B']} ({hr:.2f})")
        print(f"| {r['H']} | {r['B']} | {r['ctx']} | {r['logits_us']:.1f} | {r['logits_gbs']:.0f} ({pct:.0f}%) | "
              f"{hopper_cells(r, copy)} | {r.get('logits_sync_us', float('nan')):.1f} | "
              f"{r['unfused_us']:.1f} | {r['fused_us']:.1f} | {ratio:.2f} | {r['auto']} | {hopper_topk_cells(r)} | "
              f"{r['rows_topk_us']:.1f} | {peer:.1f} |")
    if shapes_at_128k == 0:
        verdict = "not measured (no 128K shape in this run; the full mode has them)"
    elif slower_at_128k:
        verdict = "not at " + ", ".join(slower_at_128k)
    else:
        verdict = f"met at every shape ({shapes_at_128k})"
    print("\nFused faster than unfused at 128K (cuda.indexer): " + verdict)
    if any(r.get("hopper_fused_us", 0) > 0 for r in ours if r["kind"] == "decode" and r["ctx"] >= 131072):
        hv = ("not at " + ", ".join(hopper_slower_at_128k)) if hopper_slower_at_128k else "met at every shape"
        print("\nFused faster than unfused at 128K (hopper.indexer): " + hv)
    print("\n| prefill | H_i | logits us | TFLOP/s | hopper.indexer logits us | TFLOP/s | unfused top-k us | "
          "fused top-k us | hopper.indexer unfused top-k us | hopper.indexer fused top-k us | hopper fused / unfused | "
          "hopper's faster vs cuda.indexer's faster |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in ours:
        if r["kind"] == "prefill":
            hopper = (f"{r['hopper_logits_us']:.0f} | {r['hopper_logits_tflops']:.0f}"
                      if r.get("hopper_logits_us", 0) > 0 else "- | -")
            print(f"| 4096 tokens @ 32K | {r['H']} | {r['logits_us']:.0f} | {r['logits_tflops']:.0f} | {hopper} | "
                  f"{r['unfused_us']:.0f} | {r['fused_us']:.0f} | {hopper_topk_cells(r)} |")
    eager = [r for r in peers if r["kind"] == "torch_eager_indexer"]
    if eager:
        print("\n| eager PyTorch indexer (peer) | H_i | B | context | us | GB/s |\n|---|---|---|---|---|---|")
        for r in eager:
            print(f"| bf16 bmm + relu + sum | {r['H']} | {r['B']} | {r['ctx']} | {r['us']:.0f} | {r['gbs']:.0f} |")


if __name__ == "__main__":
    main()
