/* Native-speed reference for bench/interp/run.sh: QuickJS built natively (from the C source that
 * qjsc ships) running the same workloads as interp_bench.
 *
 * usage: native_ref RUNS WORKLOAD.js...   prints one JSON line per measurement:
 *   {"engine":"quickjs-native","bench":"loop","ms":[...]}                                     */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "quickjs.h"

static double NowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static char* ReadAll(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)n + 64);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  buf[got] = 0;
  return buf;
}

static void Print(const char* bench, const double* ms, int runs) {
  printf("{\"engine\":\"quickjs-native\",\"bench\":\"%s\",\"ms\":[", bench);
  for (int i = 0; i < runs; i++) printf("%s%.4f", i ? "," : "", ms[i]);
  printf("]}\n");
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  int runs = atoi(argv[1]);
  double* ms = calloc((size_t)runs, sizeof(double));
  /* A fresh runtime and context, as the engine's fresh interpreter. */
  for (int i = 0; i < runs; i++) {
    double t0 = NowMs();
    for (int k = 0; k < 100; k++) {
      JSRuntime* rt = JS_NewRuntime();
      JSContext* ctx = JS_NewContext(rt);
      JS_FreeContext(ctx);
      JS_FreeRuntime(rt);
    }
    ms[i] = (NowMs() - t0) / 100;
  }
  Print("fresh", ms, runs);
  for (int w = 2; w < argc; w++) {
    char* body = ReadAll(argv[w]);
    if (!body) return 1;
    size_t n = strlen(body);
    char* code = malloc(n + 64);
    snprintf(code, n + 64, "(function () {%s\n})()", body);
    const char* base = strrchr(argv[w], '/');
    char name[64];
    snprintf(name, sizeof name, "%s", base ? base + 1 : argv[w]);
    char* dot = strrchr(name, '.');
    if (dot) *dot = 0;
    for (int i = 0; i < runs; i++) {
      JSRuntime* rt = JS_NewRuntime();
      JSContext* ctx = JS_NewContext(rt);
      double t0 = NowMs();
      JSValue v = JS_Eval(ctx, code, strlen(code), "<bench>", JS_EVAL_TYPE_GLOBAL);
      ms[i] = NowMs() - t0;
      if (JS_IsException(v)) {
        fprintf(stderr, "%s threw\n", name);
        return 1;
      }
      JS_FreeValue(ctx, v);
      JS_FreeContext(ctx);
      JS_FreeRuntime(rt);
    }
    Print(name, ms, runs);
    free(code);
    free(body);
  }
  return 0;
}
