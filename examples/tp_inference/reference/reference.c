/* tp_reference MODEL.bin [STEPS]: the plain single-threaded C forward pass the single-rank engine is compared with
 * (issue: "at least as fast as a plain single-threaded C reference ... built with -Ofast -march=native"). Written
 * with llama2.c run.c's loop structure (naive row-by-row matmul, per-head attention over the KV cache, RoPE on
 * adjacent pairs, SwiGLU); greedy decoding from BOS; prints the generated token ids and, on stderr, tokens/s as
 * run.c reports it (all steps after the first). Input: a checkpoint from tp_export_llama2c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  int dim, hidden, layers, heads, kv_heads, vocab, seq;
} Config;

static void rmsnorm(float* o, const float* x, const float* w, int n) {
  float ss = 0.0f;
  for (int j = 0; j < n; j++) ss += x[j] * x[j];
  ss = 1.0f / sqrtf(ss / n + 1e-5f);
  for (int j = 0; j < n; j++) o[j] = w[j] * (ss * x[j]);
}

static void softmax(float* x, int n) {
  float max = x[0], sum = 0.0f;
  for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
  for (int i = 0; i < n; i++) sum += (x[i] = expf(x[i] - max));
  for (int i = 0; i < n; i++) x[i] /= sum;
}

static void matmul(float* out, const float* x, const float* w, int n, int d) {
  for (int i = 0; i < d; i++) {
    float v = 0.0f;
    for (int j = 0; j < n; j++) v += w[(size_t)i * n + j] * x[j];
    out[i] = v;
  }
}

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static float* take(float** p, size_t n) {
  float* at = *p;
  *p += n;
  return at;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tp_reference MODEL.bin [STEPS]\n");
    return 2;
  }
  int steps = argc > 2 ? atoi(argv[2]) : 256;
  FILE* f = fopen(argv[1], "rb");
  Config c;
  if (f == NULL || fread(&c, sizeof(int), 7, f) != 7) {
    fprintf(stderr, "tp_reference: cannot read %s\n", argv[1]);
    return 1;
  }
  const int shared = c.vocab > 0;
  c.vocab = abs(c.vocab);
  if (steps > c.seq) steps = c.seq;
  fseek(f, 0, SEEK_END);
  const long bytes = ftell(f) - 7 * (long)sizeof(int);
  fseek(f, 7 * (long)sizeof(int), SEEK_SET);
  float* data = malloc((size_t)bytes);
  if (data == NULL || fread(data, 1, (size_t)bytes, f) != (size_t)bytes) {
    fprintf(stderr, "tp_reference: short file %s\n", argv[1]);
    return 1;
  }
  fclose(f);
  const int hs = c.dim / c.heads, kv_dim = c.dim * c.kv_heads / c.heads, kv_mul = c.heads / c.kv_heads;
  const size_t L = (size_t)c.layers, D = (size_t)c.dim, H = (size_t)c.hidden, KV = (size_t)kv_dim;
  float* p = data;
  float* emb = take(&p, (size_t)c.vocab * D);
  float* rms_att = take(&p, L * D);
  float* wq = take(&p, L * D * D);
  float* wk = take(&p, L * D * KV);
  float* wv = take(&p, L * D * KV);
  float* wo = take(&p, L * D * D);
  float* rms_ffn = take(&p, L * D);
  float* w1 = take(&p, L * D * H);
  float* w2 = take(&p, L * H * D);
  float* w3 = take(&p, L * D * H);
  float* rms_final = take(&p, D);
  take(&p, (size_t)c.seq * hs); /* RoPE tables, unused */
  float* wcls = shared ? emb : p;

  float *x = calloc(D, 4), *xb = calloc(D, 4), *xb2 = calloc(D, 4), *hb = calloc(H, 4), *hb2 = calloc(H, 4);
  float *q = calloc(D, 4), *k = calloc(KV, 4), *v = calloc(KV, 4), *logits = calloc((size_t)c.vocab, 4);
  float* att = calloc((size_t)c.heads * c.seq, 4);
  float *kc = calloc(L * c.seq * KV, 4), *vc = calloc(L * c.seq * KV, 4);
  int token = 1; /* BOS */
  double start = 0.0;
  for (int pos = 0; pos < steps; pos++) {
    memcpy(x, emb + (size_t)token * D, D * 4);
    for (size_t l = 0; l < L; l++) {
      rmsnorm(xb, x, rms_att + l * D, c.dim);
      matmul(q, xb, wq + l * D * D, c.dim, c.dim);
      matmul(k, xb, wk + l * D * KV, c.dim, kv_dim);
      matmul(v, xb, wv + l * D * KV, c.dim, kv_dim);
      for (int i = 0; i < c.dim; i += 2) {
        const float freq = 1.0f / powf(10000.0f, (i % hs) / (float)hs), angle = pos * freq;
        const float fcr = cosf(angle), fci = sinf(angle);
        for (int which = 0; which < (i < kv_dim ? 2 : 1); which++) {
          float* vec = which == 0 ? q : k;
          const float v0 = vec[i], v1 = vec[i + 1];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      const size_t loff = l * c.seq * KV;
      memcpy(kc + loff + pos * KV, k, KV * 4);
      memcpy(vc + loff + pos * KV, v, KV * 4);
      for (int h = 0; h < c.heads; h++) {
        const float* qh = q + h * hs;
        float* a = att + (size_t)h * c.seq;
        for (int t = 0; t <= pos; t++) {
          const float* kt = kc + loff + t * KV + (h / kv_mul) * hs;
          float score = 0.0f;
          for (int i = 0; i < hs; i++) score += qh[i] * kt[i];
          a[t] = score / sqrtf(hs);
        }
        softmax(a, pos + 1);
        float* out = xb + h * hs;
        memset(out, 0, hs * 4);
        for (int t = 0; t <= pos; t++) {
          const float* vt = vc + loff + t * KV + (h / kv_mul) * hs;
          for (int i = 0; i < hs; i++) out[i] += a[t] * vt[i];
        }
      }
      matmul(xb2, xb, wo + l * D * D, c.dim, c.dim);
      for (int i = 0; i < c.dim; i++) x[i] += xb2[i];
      rmsnorm(xb, x, rms_ffn + l * D, c.dim);
      matmul(hb, xb, w1 + l * D * H, c.dim, c.hidden);
      matmul(hb2, xb, w3 + l * D * H, c.dim, c.hidden);
      for (int i = 0; i < c.hidden; i++) hb[i] = hb[i] * (1.0f / (1.0f + expf(-hb[i]))) * hb2[i];
      matmul(xb, hb, w2 + l * H * D, c.hidden, c.dim);
      for (int i = 0; i < c.dim; i++) x[i] += xb[i];
    }
    rmsnorm(x, x, rms_final, c.dim);
    matmul(logits, x, wcls, c.dim, c.vocab);
    int next = 0;
    for (int i = 1; i < c.vocab; i++) next = logits[i] > logits[next] ? i : next;
    printf("%d\n", next);
    token = next;
    if (pos == 0) start = seconds();
  }
  fprintf(stderr, "tp_reference: %d steps, %.1f tok/s\n", steps, (steps - 1) / (seconds() - start));
  return 0;
}
