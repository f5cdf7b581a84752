"""Comparisons of what latte and vLLM's kernels (run by Triton's interpreter) wrote."""

import torch


def e4m3_step_apart(ours, vllms) -> bool:
    """Same sign bit, and magnitudes one code apart at most (e4m3 codes of one sign are ordered),
    except one artefact of the CPU run: Triton's interpreter drops the rounding carry into the
    next binade when it converts to e4m3 (126 -> 64 where the GPU's conversion, and latte, give
    128), so a vLLM code of a power of two whose latte code is the next binade's is that case;
    and it rounds subnormals its own way (2^-6 - 2^-10 became 2^-7), so codes up to the
    smallest normal (0x08, 2^-6 of a scale whose largest code is 448) may differ."""
    a, b = ours.view(torch.uint8).to(torch.int16), vllms.view(torch.uint8).to(torch.int16)
    same_sign = (a & 0x80) == (b & 0x80)
    ma, mb = a & 0x7F, b & 0x7F
    near = (ma - mb).abs() <= 1
    dropped_carry = ((ma & 0x07) == 0) & ((mb & 0x07) == 0) & (ma - mb == 8)
    subnormal = (ma <= 0x08) & (mb <= 0x08)
    return bool((same_sign & (near | dropped_carry | subnormal)).all())


def bf16_ulp_apart(ours, vllms) -> bool:
    """bf16 values at most one unit in the last place apart. The CPU run's artefact: Triton's
    interpreter truncates float32 to bf16 where the GPU (and torch) round to nearest."""
    a = ours.to(torch.bfloat16).contiguous().view(torch.int16).to(torch.int32)
    b = vllms.to(torch.bfloat16).contiguous().view(torch.int16).to(torch.int32)
    return bool(((a - b).abs() <= 1).all())


def e4m3_groups_match(codes_l, scales_l, codes_v, scales_v, amax_bf16) -> bool:
    """Groups of e4m3 codes ``[G, n]`` with one float32 scale each ``[G]``, latte's against
    vLLM's. latte quantizes the bf16-rounded value, vLLM the float32 one: the scales are equal,
    except where the bf16 group's amax / 448 is exactly a power of two (``amax_bf16`` [G]) and
    vLLM's float32 amax lies just above it, where vLLM's scale is twice latte's. Groups of equal
    scale have codes one step apart (:func:`e4m3_step_apart`); in the others latte's values,
    requantized at vLLM's scale, are one step apart from vLLM's codes."""
    same = scales_l == scales_v
    edge = (scales_l * 2 == scales_v) & (torch.frexp(amax_bf16 / 448.0).mantissa == 0.5)
    if not bool((same | edge).all()):
        return False
    if not e4m3_step_apart(codes_l[same], codes_v[same]):
        return False
    values_l = codes_l[edge].view(torch.float8_e4m3fn).float() * scales_l[edge, None]
    requant = (values_l / scales_v[edge, None]).to(torch.float8_e4m3fn)
    return e4m3_step_apart(requant, codes_v[edge])


def indexer_pages_match(pages_l, pages_v, block, keys, slots) -> bool:
    """Indexer caches ``[nb, block, 132]`` u8 written from the bf16 ``keys`` [T, 128] at
    ``slots``: the written tokens as :func:`e4m3_groups_match`, every other byte equal."""
    nb = pages_l.shape[0]
    flat_l, flat_v = pages_l.reshape(nb, -1), pages_v.reshape(nb, -1)

    def split(flat):
        codes = flat[:, :block * 128].reshape(nb * block, 128)
        scales = flat[:, block * 128:].contiguous().view(torch.float32).reshape(nb * block)
        return codes, scales

    (cl, sl), (cv, sv) = split(flat_l), split(flat_v)
    s = slots.long()
    written = torch.zeros(nb * block, dtype=torch.bool)
    written[s] = True
    if not (torch.equal(cl[~written], cv[~written]) and torch.equal(sl[~written], sv[~written])):
        return False
    return e4m3_groups_match(cl[s], sl[s], cv[s], sv[s], keys.float().abs().amax(-1))


def ds_mla_rows_match(rows_l, rows_v, latent) -> bool:
    """656-byte fp8_ds_mla rows [T, 656] written from the bf16 ``latent`` [T, 512]: the four
    128-value groups as :func:`e4m3_groups_match`, the bf16 rope one unit apart at most."""
    t = rows_l.shape[0]
    codes_l, codes_v = rows_l[:, :512].reshape(t * 4, 128), rows_v[:, :512].reshape(t * 4, 128)
    sl = rows_l[:, 512:528].contiguous().view(torch.float32).reshape(t * 4)
    sv = rows_v[:, 512:528].contiguous().view(torch.float32).reshape(t * 4)
    amax = latent.float().reshape(t * 4, 128).abs().amax(-1)
    rope_l = rows_l[:, 528:].contiguous().view(torch.bfloat16)
    rope_v = rows_v[:, 528:].contiguous().view(torch.bfloat16)
    return e4m3_groups_match(codes_l, sl, codes_v, sv, amax) and bf16_ulp_apart(rope_l, rope_v)
