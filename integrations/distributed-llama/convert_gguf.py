#!/usr/bin/env python3
r"""Convert a Llama-architecture GGUF file into distributed-llama's model (.m) and tokenizer (.t) files.

Usage: convert_gguf.py IN.gguf OUT_PREFIX [--weights f32|q40] [--ffn-multiple N] [--max-seq-len N]
Writes OUT_PREFIX.m and OUT_PREFIX.t. numpy only (on Debian run it with /usr/bin/python3, which has python3-numpy).

Input: GGUF v2/v3 (own reader: header, metadata of every value type including nested arrays, tensor infos, data
aligned to `general.alignment`, default 32). Tensor types F32, F16, BF16, Q8_0 and Q4_0 are dequantised to f32.
Architecture `llama` only (no MoE, no llama3 rope_freqs scaling, RMSNorm eps 1e-5 or 1e-6: dllama encodes nothing else).

Model format (dllama converter/writer.py, src/llm.cpp loadLlmHeader/loadLlmNetWeight):
  int32 magic 0xA00ABCD, int32 header size in bytes (8 + 8 * pairs), then int32 (key, value) pairs;
  keys: version 0, arch_type 1 (0xABCD00 = llama), dim 2, hidden_dim 3, n_layers 4, n_heads 5, n_kv_heads 6,
  n_experts 7, n_active_experts 8, vocab_size 9, max_seq_len 10, hidden_act 11 (1 = silu), rope_theta 12 (int),
  weights_float_type 13 (0 f32, 2 q40), head_dim 19, norm_epsilon 20 (5 -> 1e-5, 6 -> 1e-6).
  Tensors follow with no padding, row-major [out, in] like torch: token embedding (always f32, vocab x dim), then per
  layer wq, wk, wv, wo, w1 (gate), w2 (down), w3 (up) in the weight type, attention norm and FFN norm (f32), then the
  final norm (f32) and the classifier wcls (weight type). dllama has no tied-output flag, so a GGUF without
  output.weight gets the token embedding written again as wcls. Q40 blocks are 32 consecutive inputs of a row:
  f16 delta then 16 bytes of nibbles (element j in the low nibble of byte j, element j+16 in the high one), value
  (nibble - 8) * delta; quantised exactly like writer.py (delta = signed max-magnitude / -8, nibble =
  trunc(clip(x / delta + 8.5, 0, 15))). q40 weights need `--buffer-float-type q80` at run time (app.cpp).

RoPE: no Q/K permutation. dllama's ROPE_LLAMA rotates adjacent pairs (i, i+1) of each head (nn-cpu-ops.cpp
ropeLlama_F32, frequency theta^-(i mod headDim)/headDim), i.e. Meta's layout, which is also what llama-architecture
GGUFs hold (llama.cpp's HF converter un-permutes HF's half-split layout back into pairs for its NORM rope; llama2.c
exports are pairs already). dllama's convert-hf.py applies that same un-permutation to HF weights; we need none.

FFN padding: dllama slices w1/w3 by rows and w2 by columns, so each node's w2 slice has hidden_dim / nNodes inputs,
and its matmul asserts n % 8 (AVX2 f32), n % 4 (NEON f32) and n % 32 (Q40 blocks, also Q80 sync buffers). The
hidden size is therefore padded with zero units (zero rows in w1 and w3, zero columns in w2: silu(0) * 0 adds 0,
so results are unchanged) to a multiple of 8 * 4 = 32 for f32 and 32 * 4 = 128 for q40, the smallest that work at
1, 2 and 4 nodes. stories260K: 172 -> 192 (f32) or 256 (q40).

Tokenizer format (converter/tokenizer-writer.py, src/tokenizer.cpp): int32 magic 0x567124, int32 header size,
int32 pairs (bos_id 3, version 0 = 1, vocab_size 1, max_token_length 2, n_eos_tokens 9, add_bos 10), the eos ids
as int32, then per token float32 score, uint32 byte length, bytes. Pieces come from tokenizer.ggml.tokens with the
SentencePiece space U+2581 replaced by ' ' (as convert-tokenizer-llama2.py does) and byte tokens <0xXX> written as
the single byte, so dllama prints newlines as llama2.c does rather than the text "<0x0A>".

Running and comparing (checked byte for byte against stories260K.greedy.txt at 1, 2 and 4 nodes, f32):
  dllama inference --model P.m --tokenizer P.t --buffer-float-type f32 --prompt "" --steps 256 \
      --temperature 0 --nthreads 1 [--workers 127.0.0.1:PORT ...]   (workers: dllama worker --port PORT --nthreads 1)
  --prompt "" makes dllama start from BOS alone at position 0, like llama2.c; --temperature 0 is argmax (first
  maximum). The text is every piece after "🔶 Pred ... kB | " up to the newline before the next "🔶 Pred" (the
  last one is followed by "\nEvaluation\n"; pieces may contain newlines), joined, minus one leading space
  (SentencePiece/llama2.c drop it after BOS), plus the "\n" that llama2.c prints at the end:
  python3 -c 'import re,sys; o=sys.stdin.buffer.read(); t=b"".join(re.findall(rb"\xf0\x9f\x94\xb6 Pred *\d+ ms Sync *\d+ ms \| Sent *\d+ kB Recv *\d+ kB \| (.*?)\n(?=\xf0\x9f\x94\xb6 Pred|\nEvaluation\n)", o, re.S)); sys.stdout.buffer.write((t[1:] if t[:1] == b" " else t) + b"\n")'
  dllama prints "~" for a token without text (BOS, EOS); stories260K's vocabulary also has a "~" token. dllama
  does not stop at BOS/EOS in inference mode (llama2.c stops at BOS); the 256-step reference contains neither.
  Non-empty prompts do not reproduce llama2.c: dllama's tokenizer treats every id >= bos_id (1) as special, so a
  prompt becomes one byte token per character (no merges, no leading-space prefix), and after the prompt it feeds
  inputTokens[n] (past the end, 0 = <unk>) instead of the last prompt token (dllama.cpp: token = inputTokens[pos + 1]).
"""

import argparse
import mmap
import struct
import sys

import numpy as np

GGUF_SCALARS = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<B',
                10: '<Q', 11: '<q', 12: '<d'}  # struct formats, also valid numpy dtypes
GGUF_STRING, GGUF_ARRAY = 8, 9
# ggml type -> (elements per block, bytes per block)
GGML_TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18)}
GGML_NAMES = {0: 'F32', 1: 'F16', 30: 'BF16', 8: 'Q8_0', 2: 'Q4_0'}

Q40_BLOCK = np.dtype([('d', '<f2'), ('qs', 'u1', 16)])
DLLAMA_F32, DLLAMA_Q40 = 0, 2
WEIGHT_TYPES = {'f32': DLLAMA_F32, 'q40': DLLAMA_Q40}
FFN_MULTIPLE = {'f32': 32, 'q40': 128}
HEADER_KEYS = {'version': 0, 'arch_type': 1, 'dim': 2, 'hidden_dim': 3, 'n_layers': 4, 'n_heads': 5,
               'n_kv_heads': 6, 'n_experts': 7, 'n_active_experts': 8, 'vocab_size': 9, 'max_seq_len': 10,
               'hidden_act': 11, 'rope_theta': 12, 'weights_float_type': 13, 'head_dim': 19, 'norm_epsilon': 20}
LLAMA_ARCH = 0xABCD00
LAYER_TENSORS = ('attn_q', 'attn_k', 'attn_v', 'attn_output', 'ffn_gate', 'ffn_down', 'ffn_up', 'attn_norm', 'ffn_norm')


class GGUFReader:
    """GGUF v2/v3 reader over a read-only mmap; every read is bounds-checked."""

    def __init__(self, path):
        with open(path, 'rb') as f:
            self.mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.path, self.pos = path, 0
        if self._bytes(4) != b'GGUF':
            raise ValueError(f'{path}: not a GGUF file')
        version, n_tensors, n_kv = self._unpack('<I'), self._unpack('<Q'), self._unpack('<Q')
        if version not in (2, 3):
            raise ValueError(f'{path}: unsupported GGUF version {version}')
        self.metadata = {}
        for _ in range(n_kv):
            key = self._string()
            self.metadata[key] = self._value(self._unpack('<I'))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._unpack('<Q') for _ in range(self._unpack('<I'))]
            infos.append((name, dims, self._unpack('<I'), self._unpack('<Q')))
        align = int(self.metadata.get('general.alignment', 32))
        data_start = (self.pos + align - 1) // align * align
        self.tensors = {name: (dims, ggml_type, data_start + off) for name, dims, ggml_type, off in infos}

    def _need(self, n):
        if n < 0 or self.pos + n > len(self.mm):
            raise ValueError(f'{self.path}: truncated at offset {self.pos} (need {n} bytes)')

    def _bytes(self, n):
        self._need(n)
        self.pos += n
        return self.mm[self.pos - n:self.pos]

    def _unpack(self, fmt):
        return struct.unpack(fmt, self._bytes(struct.calcsize(fmt)))[0]

    def _string(self):
        return self._bytes(self._unpack('<Q')).decode('utf-8', 'surrogateescape')

    def _value(self, vtype):
        if vtype == GGUF_STRING:
            return self._string()
        if vtype == GGUF_ARRAY:
            etype, count = self._unpack('<I'), self._unpack('<Q')
            if etype in GGUF_SCALARS:
                dtype = np.dtype(GGUF_SCALARS[etype])
                self._need(count * dtype.itemsize)
                arr = np.frombuffer(self.mm, dtype, count, self.pos).copy()
                self.pos += count * dtype.itemsize
                return arr.astype(bool) if etype == 7 else arr
            return [self._value(etype) for _ in range(count)]
        if vtype not in GGUF_SCALARS:
            raise ValueError(f'{self.path}: unknown metadata value type {vtype} at offset {self.pos}')
        value = self._unpack(GGUF_SCALARS[vtype])
        return bool(value) if vtype == 7 else value

    def tensor(self, name):
        """Returns the tensor as float32 with numpy shape = GGUF dims reversed ([rows, cols] for a matrix)."""
        dims, ggml_type, offset = self.tensors[name]
        if ggml_type not in GGML_TYPES:
            raise ValueError(f'{name}: unsupported ggml tensor type {ggml_type}')
        n = int(np.prod(dims))
        block, block_bytes = GGML_TYPES[ggml_type]
        if n % block:
            raise ValueError(f'{name}: {n} elements is not a multiple of the block size {block}')
        nbytes = n // block * block_bytes
        if offset + nbytes > len(self.mm):
            raise ValueError(f'{name}: data past the end of the file')
        raw = np.frombuffer(self.mm, np.uint8, nbytes, offset)
        if ggml_type == 0:
            out = raw.view('<f4').astype(np.float32)
        elif ggml_type == 1:
            out = raw.view('<f2').astype(np.float32)
        elif ggml_type == 30:
            out = (raw.view('<u2').astype(np.uint32) << 16).view(np.float32)
        elif ggml_type == 8:
            blocks = raw.reshape(-1, 34)
            d = blocks[:, :2].copy().view('<f2').astype(np.float32)
            out = (blocks[:, 2:].view(np.int8).astype(np.float32) * d).reshape(-1)
        else:
            blocks = raw.reshape(-1, 18)
            d = blocks[:, :2].copy().view('<f2').astype(np.float32)
            qs = blocks[:, 2:]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32) - 8.0
            out = (q * d).reshape(-1)
        return out.reshape(tuple(reversed(dims)))


def quantize_q40(x):
    """Q40 blocks of a float32 array whose size is a multiple of 32, exactly as dllama's writer.py does it."""
    groups = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    gmax, gmin = groups.max(axis=1), groups.min(axis=1)
    deltas = np.where(-gmin > gmax, gmin, gmax) / np.float32(-8)
    with np.errstate(divide='ignore'):
        ids = np.where(deltas != 0, np.float32(1) / deltas, np.float32(0)).astype(np.float32)
    q = np.clip(groups * ids[:, None] + np.float32(8.5), 0, 15).astype(np.uint8)
    blocks = np.empty(len(groups), dtype=Q40_BLOCK)
    blocks['d'] = deltas.astype(np.float16)
    blocks['qs'] = q[:, :16] | (q[:, 16:] << 4)
    return blocks


def write_tensor(f, x, float_type):
    if float_type == DLLAMA_F32:
        np.ascontiguousarray(x, dtype='<f4').tofile(f)
    elif float_type == DLLAMA_Q40:
        quantize_q40(x).tofile(f)
    else:
        raise ValueError(f'unsupported dllama float type {float_type}')


def write_model_header(f, params):
    data = b''.join(struct.pack('<ii', HEADER_KEYS[k], int(v)) for k, v in params.items())
    f.write(struct.pack('<ii', 0xA00ABCD, 8 + len(data)) + data)


def write_tokenizer(path, pieces, scores, bos_id, eos_ids, add_bos=True):
    """pieces: list of bytes (non-empty); scores: float per piece."""
    # keys in tokenizer-writer.py's order (bos_id, version, vocab_size, ...), so the bytes match its output
    params = [(3, bos_id), (0, 1), (1, len(pieces)), (2, max(len(p) for p in pieces)),
              (9, len(eos_ids)), (10, 1 if add_bos else 0)]
    data = b''.join(struct.pack('<ii', k, v) for k, v in params)
    with open(path, 'wb') as f:
        f.write(struct.pack('<ii', 0x567124, 8 + len(data)) + data)
        f.write(np.asarray(eos_ids, dtype='<i4').tobytes())
        for piece, score in zip(pieces, scores):
            assert len(piece) > 0
            f.write(struct.pack('<fI', float(score), len(piece)) + piece)


def valid_node_counts(p, weights, candidates=(1, 2, 4, 8, 16)):
    """Node counts dllama accepts for these shapes (app.cpp, nn-core.cpp slicing, matmul/quant asserts)."""
    align = 32 if weights == 'q40' else 8
    q_dim, kv_dim = p['head_dim'] * p['n_heads'], p['head_dim'] * p['n_kv_heads']
    if p['dim'] % align or p['head_dim'] % 8:
        return []
    ok = []
    for n in candidates:
        if (n <= p['n_kv_heads'] and p['n_heads'] % n == 0 and kv_dim % n == 0 and p['vocab_size'] % n == 0
                and q_dim % (n * 2) == 0 and (kv_dim // n) % 2 == 0
                and (q_dim // n) % align == 0 and (p['hidden_dim'] // n) % align == 0):
            ok.append(n)
    return ok


def pad_ffn(w1, w2, w3, hidden):
    extra = hidden - w1.shape[0]
    if extra == 0:
        return w1, w2, w3
    w1, w3 = (np.concatenate([w, np.zeros((extra, w.shape[1]), np.float32)], axis=0) for w in (w1, w3))
    return w1, np.concatenate([w2, np.zeros((w2.shape[0], extra), np.float32)], axis=1), w3


def model_params(g, weights, ffn_multiple, max_seq_len):
    meta = g.metadata
    arch = meta.get('general.architecture')
    if arch != 'llama':
        raise ValueError(f'architecture {arch!r} is not supported (only llama)')
    if meta.get('llama.expert_count', 0) or 'rope_freqs.weight' in g.tensors:
        raise ValueError('MoE and llama3-style rope_freqs scaling are not supported')
    scaling = meta.get('llama.rope.scaling.type', 'none')
    if scaling != 'none':
        raise ValueError(f'rope scaling {scaling!r} is not supported')
    def get(key, default=None):
        return meta.get(f'llama.{key}', default)
    dim, n_heads = int(get('embedding_length')), int(get('attention.head_count'))
    n_kv_heads = get('attention.head_count_kv', n_heads)
    if isinstance(n_kv_heads, np.ndarray):
        if len(set(n_kv_heads.tolist())) != 1:
            raise ValueError('per-layer KV head counts are not supported')
        n_kv_heads = n_kv_heads[0]
    head_dim = int(get('attention.key_length', dim // n_heads))
    if int(get('rope.dimension_count', head_dim)) != head_dim:
        raise ValueError('partial RoPE is not supported')
    eps = float(get('attention.layer_norm_rms_epsilon', 1e-5))
    eps_code = next((c for c, e in ((5, 1e-5), (6, 1e-6)) if abs(eps - e) < e * 1e-3), None)
    if eps_code is None:
        raise ValueError(f'RMSNorm epsilon {eps} is not supported by dllama (only 1e-5, 1e-6)')
    theta = float(get('rope.freq_base', 10000.0))
    if theta != int(theta):
        raise ValueError(f'rope theta {theta} is not an integer (dllama stores it as int)')
    hidden = int(get('feed_forward_length'))
    vocab = g.tensors['token_embd.weight'][0][1]
    params = {
        'version': 0, 'arch_type': LLAMA_ARCH, 'dim': dim, 'hidden_dim': -(-hidden // ffn_multiple) * ffn_multiple,
        'n_layers': int(get('block_count')), 'n_heads': n_heads, 'n_kv_heads': int(n_kv_heads),
        'n_experts': 0, 'n_active_experts': 0, 'vocab_size': int(vocab),
        'max_seq_len': max_seq_len or int(get('context_length', 2048)), 'hidden_act': 1, 'rope_theta': int(theta),
        'weights_float_type': WEIGHT_TYPES[weights], 'head_dim': head_dim, 'norm_epsilon': eps_code,
    }
    return params, hidden


def convert_model(g, out_path, weights, ffn_multiple, max_seq_len):
    params, hidden = model_params(g, weights, ffn_multiple, max_seq_len)
    wt = params['weights_float_type']
    with open(out_path, 'wb') as f:
        write_model_header(f, params)
        embedding = g.tensor('token_embd.weight')
        write_tensor(f, embedding, DLLAMA_F32)
        for layer in range(params['n_layers']):
            t = {name: g.tensor(f'blk.{layer}.{name}.weight') for name in LAYER_TENSORS}
            for name in ('attn_q', 'attn_k', 'attn_v', 'attn_output'):
                write_tensor(f, t[name], wt)
            for w in pad_ffn(t['ffn_gate'], t['ffn_down'], t['ffn_up'], params['hidden_dim']):
                write_tensor(f, w, wt)
            write_tensor(f, t['attn_norm'], DLLAMA_F32)
            write_tensor(f, t['ffn_norm'], DLLAMA_F32)
        write_tensor(f, g.tensor('output_norm.weight'), DLLAMA_F32)
        tied = 'output.weight' not in g.tensors
        write_tensor(f, embedding if tied else g.tensor('output.weight'), wt)
    return params, hidden, tied


def convert_tokenizer(g, out_path):
    meta = g.metadata
    if meta.get('tokenizer.ggml.model') != 'llama':
        raise ValueError(f"tokenizer {meta.get('tokenizer.ggml.model')!r} is not supported (only llama/SentencePiece)")
    tokens = meta['tokenizer.ggml.tokens']
    scores = meta.get('tokenizer.ggml.scores', np.zeros(len(tokens), np.float32))
    types = meta.get('tokenizer.ggml.token_type', np.ones(len(tokens), np.int32))
    pieces = []
    for token, token_type in zip(tokens, types):
        if token_type == 6 and len(token) == 6 and token.startswith('<0x') and token.endswith('>'):
            pieces.append(bytes([int(token[3:5], 16)]))
        else:
            pieces.append(token.replace('\u2581', ' ').encode('utf-8', 'surrogateescape'))
    bos = int(meta.get('tokenizer.ggml.bos_token_id', 1))
    eos = int(meta.get('tokenizer.ggml.eos_token_id', 2))
    write_tokenizer(out_path, pieces, scores, bos, [eos], bool(meta.get('tokenizer.ggml.add_bos_token', True)))
    return len(pieces), bos, eos


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('gguf')
    ap.add_argument('out_prefix', help='writes OUT_PREFIX.m and OUT_PREFIX.t')
    ap.add_argument('--weights', choices=sorted(WEIGHT_TYPES), default='f32', help='matmul weight type (default f32)')
    ap.add_argument('--ffn-multiple', type=int, default=None,
                    help='pad the FFN hidden size to a multiple of this (default 32 for f32, 128 for q40)')
    ap.add_argument('--max-seq-len', type=int, default=0, help='override the context length (default: GGUF)')
    args = ap.parse_args(argv)
    g = GGUFReader(args.gguf)
    multiple = args.ffn_multiple or FFN_MULTIPLE[args.weights]
    params, hidden, tied = convert_model(g, args.out_prefix + '.m', args.weights, multiple, args.max_seq_len)
    n_vocab, bos, eos = convert_tokenizer(g, args.out_prefix + '.t')
    print(f'{args.out_prefix}.m: ' + ', '.join(f'{k}={v}' for k, v in params.items()))
    print(f'  FFN hidden {hidden} -> {params["hidden_dim"]} (zero-padded), output head '
          f'{"tied: embedding written as wcls" if tied else "from output.weight"}')
    print(f'  dllama node counts that work: {valid_node_counts(params, args.weights)}')
    print(f'{args.out_prefix}.t: vocab {n_vocab}, bos {bos}, eos {eos}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
