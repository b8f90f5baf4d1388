#!/usr/bin/env python3
"""Write a deterministic synthetic Llama model in distributed-llama's format: OUT_PREFIX.m and OUT_PREFIX.t.

Usage: make_synthetic.py OUT_PREFIX [--dim 2048] [--hidden H] [--layers 8] [--heads 32] [--kv-heads 8]
                         [--vocab 512] [--seq-len 2048] [--weights f32|q40] [--seed 0] [--std 0.02]
                         [--tokenizer EXISTING.t]
numpy only (on Debian run it with /usr/bin/python3). The file formats, tensor order and Q40 quantisation are
convert_gguf.py's (see its header); this script imports its writer functions from the same folder.

Weights: every matrix (embedding, wq, wk, wv, wo, w1, w2, w3, wcls) is uniform in [-a, a) with a = std * sqrt(3)
(standard deviation --std, default 0.02), drawn from numpy's PCG64 seeded with (seed, tensor index), so a tensor
does not depend on the others' shapes; RMSNorm weights are 1.0. The same seed and sizes give the same bytes.
Greedy generation is then well defined: activations stay O(1), no NaN or inf, logits spread enough that argmax
ties are not an issue. The classifier is its own random matrix (not tied).

Shapes that dllama accepts at 1, 2 and 4 nodes: n_kv_heads >= 4 (app.cpp refuses nNodes > nKvHeads), heads and kv
dims divisible by the node count, head_dim a multiple of 8 (AVX2 attention dot product), dim a multiple of 32 and
each node's slice of the attention output (dim / nNodes) and of the FFN (hidden / nNodes) a multiple of 8 (f32) or
32 (q40 blocks, Q80 sync). The default hidden size is 8/3 * dim rounded up to a multiple of 256 (Llama's rule),
which satisfies that at 4 nodes; the script checks the shapes and says which node counts work.

Default size: dim 2048, hidden 5632, 8 layers, 32 heads, 8 KV heads (head_dim 64), vocab 512: 361M parameters,
1.45 GB as f32 and 208 MB as q40, written in about 5 s. On the 2-core development machine (idle, --nthreads 1 per
node, localhost TCP) dllama generated about 17 tokens/s (f32) and 35 (q40) on one node, 24-38 and 60-68 on two.
q40 runs need --buffer-float-type q80. With q40 the text of 1 node differs from 2 nodes after some tokens (Q80 sync
quantises each node's partial sums of wo and w2 before adding them), but each node count is deterministic.

Tokenizer: unless --tokenizer copies an existing .t, a printable vocabulary is written: <unk>, <s> (BOS 1),
</s> (EOS 2), the printable ASCII characters except '~' (dllama prints '~' for a token without text, such as
BOS and EOS, so '~' in the output is never a token's text), then ' aa', ' ab', ... up to the vocab size.
"""

import argparse
import os
import shutil
import string
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_gguf import (DLLAMA_F32, LLAMA_ARCH, WEIGHT_TYPES, valid_node_counts,  # noqa: E402
                          write_model_header, write_tensor, write_tokenizer)


def random_matrix(seed, index, rows, cols, std):
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, index])))
    x = rng.random((rows, cols), dtype=np.float32)
    half_width = np.float32(std * np.sqrt(3.0))
    x *= np.float32(2.0) * half_width
    x -= half_width
    return x


def synthetic_vocab(size):
    chars = [c for c in string.printable if c.isprintable() and c != '~']  # 0x20..0x7e without '~'
    pairs = [' ' + a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    pieces = [b'<unk>', b'<s>', b'</s>'] + [c.encode() for c in sorted(chars)] + [p.encode() for p in pairs]
    if size > len(pieces):
        raise ValueError(f'the built-in vocabulary has at most {len(pieces)} tokens')
    return pieces[:size]


def write_model(path, p, weights, seed, std):
    wt = WEIGHT_TYPES[weights]
    dim, hidden = p['dim'], p['hidden_dim']
    q_dim, kv_dim = p['head_dim'] * p['n_heads'], p['head_dim'] * p['n_kv_heads']
    ones = np.ones(dim, np.float32)
    counter = iter(range(1 << 30))

    def mat(rows, cols):  # each matrix gets its own stream: (seed, running tensor index)
        return random_matrix(seed, next(counter), rows, cols, std)

    with open(path, 'wb') as f:
        write_model_header(f, p)
        write_tensor(f, mat(p['vocab_size'], dim), DLLAMA_F32)
        for _ in range(p['n_layers']):
            for rows, cols in ((q_dim, dim), (kv_dim, dim), (kv_dim, dim), (dim, q_dim),
                               (hidden, dim), (dim, hidden), (hidden, dim)):
                write_tensor(f, mat(rows, cols), wt)
            write_tensor(f, ones, DLLAMA_F32)
            write_tensor(f, ones, DLLAMA_F32)
        write_tensor(f, ones, DLLAMA_F32)
        write_tensor(f, mat(p['vocab_size'], dim), wt)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('out_prefix', help='writes OUT_PREFIX.m and OUT_PREFIX.t')
    ap.add_argument('--dim', type=int, default=2048)
    ap.add_argument('--hidden', type=int, default=0, help='FFN size (default: 8/3 * dim rounded up to 256)')
    ap.add_argument('--layers', type=int, default=8)
    ap.add_argument('--heads', type=int, default=32)
    ap.add_argument('--kv-heads', type=int, default=8)
    ap.add_argument('--vocab', type=int, default=512)
    ap.add_argument('--seq-len', type=int, default=2048)
    ap.add_argument('--weights', choices=sorted(WEIGHT_TYPES), default='f32')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--std', type=float, default=0.02, help='standard deviation of the matrices (default 0.02)')
    ap.add_argument('--tokenizer', help='copy this .t instead of writing the built-in vocabulary')
    args = ap.parse_args(argv)

    if args.dim % args.heads or args.heads % args.kv_heads:
        ap.error('--dim must be divisible by --heads, and --heads by --kv-heads')
    hidden = args.hidden or -(-(8 * args.dim // 3) // 256) * 256
    p = {'version': 0, 'arch_type': LLAMA_ARCH, 'dim': args.dim, 'hidden_dim': hidden, 'n_layers': args.layers,
         'n_heads': args.heads, 'n_kv_heads': args.kv_heads, 'n_experts': 0, 'n_active_experts': 0,
         'vocab_size': args.vocab, 'max_seq_len': args.seq_len, 'hidden_act': 1, 'rope_theta': 10000,
         'weights_float_type': WEIGHT_TYPES[args.weights], 'head_dim': args.dim // args.heads, 'norm_epsilon': 5}
    nodes = valid_node_counts(p, args.weights)
    if not nodes:
        ap.error('dllama cannot run these shapes on any node count (see the header for the constraints)')

    write_model(args.out_prefix + '.m', p, args.weights, args.seed, args.std)
    if args.tokenizer:
        shutil.copyfile(args.tokenizer, args.out_prefix + '.t')
    else:
        pieces = synthetic_vocab(args.vocab)
        write_tokenizer(args.out_prefix + '.t', pieces, [0.0] * len(pieces), 1, [2])

    n_params = sum(r * c for r, c in [(args.vocab, args.dim)] * 2) + args.layers * (
        2 * args.dim * args.dim + 2 * args.dim * p['head_dim'] * args.kv_heads + 3 * args.dim * hidden)
    print(f'{args.out_prefix}.m: {n_params / 1e6:.1f}M parameters, {os.path.getsize(args.out_prefix + ".m")} '
          f'bytes; ' + ', '.join(f'{k}={v}' for k, v in p.items()))
    print(f'  dllama node counts that work: {nodes}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
