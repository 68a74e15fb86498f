#include "machine_limits/limits.hpp"
#include "machine_limits/loops.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <new>
#include <thread>
#include <vector>

namespace tokenhost::bench {

namespace {

using timing::clock_type;
using timing::median_of;
using timing::rate;
using timing::running;
volatile int8_t g_one = 1, g_two = 2;

// The loops below are written out in each function: a lambda would not inherit its target attribute.
// 12 independent accumulators hide the instruction's latency (4-5 cycles at 2 per cycle at most).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double vnni512(double seconds) {
  const __m512i a = _mm512_set1_epi8(g_one), b = _mm512_set1_epi8(g_two);
#define TH_DECL(i) __m512i acc##i = _mm512_setzero_si512();
  TH_EACH12(TH_DECL)
#undef TH_DECL
  double macs = 0;
  const auto started = clock_type::now();
  do {
    for (int i = 0; i < 1000; ++i) {
#define TH_STEP(i) acc##i = _mm512_dpbusd_epi32(acc##i, a, b); __asm__ volatile("" : "+v"(acc##i));
      TH_EACH12(TH_STEP)
#undef TH_STEP
    }
    macs += 1000.0 * (12 * 64);
  } while (running(started, seconds));
  alignas(64) int32_t lanes[16];
  int64_t s = 0;
#define TH_SUM(i) _mm512_store_si512(lanes, acc##i); s += lanes[0];
  TH_EACH12(TH_SUM)
#undef TH_SUM
  timing::sink = timing::sink + s;
  return macs;
}

__attribute__((target("avx2,avx512vl,avx512vnni"))) double vnni256(double seconds) {
  const __m256i a = _mm256_set1_epi8(g_one), b = _mm256_set1_epi8(g_two);
#define TH_DECL(i) __m256i acc##i = _mm256_setzero_si256();
  TH_EACH12(TH_DECL)
#undef TH_DECL
  double macs = 0;
  const auto started = clock_type::now();
  do {
    for (int i = 0; i < 1000; ++i) {
#define TH_STEP(i) acc##i = _mm256_dpbusd_epi32(acc##i, a, b); __asm__ volatile("" : "+v"(acc##i));
      TH_EACH12(TH_STEP)
#undef TH_STEP
    }
    macs += 1000.0 * (12 * 32);
  } while (running(started, seconds));
  int64_t s = 0;
#define TH_SUM(i) s += _mm256_extract_epi32(acc##i, 0);
  TH_EACH12(TH_SUM)
#undef TH_SUM
  timing::sink = timing::sink + s;
  return macs;
}

// AVX2's int8 product as the kernels do it: u8 x s8 pairs to i16 (vpmaddubsw), pairs of those to i32
// (vpmaddwd with ones), added.
__attribute__((target("avx2"))) double avx2_int8(double seconds) {
  const __m256i a = _mm256_set1_epi8(g_one), b = _mm256_set1_epi8(g_two), ones = _mm256_set1_epi16(1);
// Each accumulator's own input, passed through an empty asm each step: the products of constant
// inputs would otherwise be computed once, outside the loop.
#define TH_DECL(i) __m256i acc##i = _mm256_setzero_si256(), in##i = a;
  TH_EACH8(TH_DECL)
#undef TH_DECL
  double macs = 0;
  const auto started = clock_type::now();
  do {
    for (int i = 0; i < 1000; ++i) {
#define TH_STEP(i) __asm__ volatile("" : "+v"(in##i)); acc##i = _mm256_add_epi32(acc##i, _mm256_madd_epi16(_mm256_maddubs_epi16(in##i, b), ones)); __asm__ volatile("" : "+v"(acc##i));
      TH_EACH8(TH_STEP)
#undef TH_STEP
    }
    macs += 1000.0 * (8 * 32);
  } while (running(started, seconds));
  int64_t s = 0;
#define TH_SUM(i) s += _mm256_extract_epi32(acc##i, 0);
  TH_EACH8(TH_SUM)
#undef TH_SUM
  timing::sink = timing::sink + s;
  return macs;
}

__attribute__((target("avx512f"))) double fma512(double seconds) {
  const __m512 a = _mm512_set1_ps(float(g_one)), b = _mm512_set1_ps(1e-9f);
#define TH_DECL(i) __m512 acc##i = _mm512_setzero_ps();
  TH_EACH12(TH_DECL)
#undef TH_DECL
  double macs = 0;
  const auto started = clock_type::now();
  do {
    for (int i = 0; i < 1000; ++i) {
#define TH_STEP(i) acc##i = _mm512_fmadd_ps(a, b, acc##i); __asm__ volatile("" : "+v"(acc##i));
      TH_EACH12(TH_STEP)
#undef TH_STEP
    }
    macs += 1000.0 * (12 * 16);
  } while (running(started, seconds));
  alignas(64) float lanes[16];
  float s = 0;
#define TH_SUM(i) _mm512_store_ps(lanes, acc##i); s += lanes[0];
  TH_EACH12(TH_SUM)
#undef TH_SUM
  timing::sink = timing::sink + int64_t(s);
  return macs;
}

__attribute__((target("avx2,fma"))) double fma256(double seconds) {
  const __m256 a = _mm256_set1_ps(float(g_one)), b = _mm256_set1_ps(1e-9f);
#define TH_DECL(i) __m256 acc##i = _mm256_setzero_ps();
  TH_EACH12(TH_DECL)
#undef TH_DECL
  double macs = 0;
  const auto started = clock_type::now();
  do {
    for (int i = 0; i < 1000; ++i) {
#define TH_STEP(i) acc##i = _mm256_fmadd_ps(a, b, acc##i); __asm__ volatile("" : "+v"(acc##i));
      TH_EACH12(TH_STEP)
#undef TH_STEP
    }
    macs += 1000.0 * (12 * 8);
  } while (running(started, seconds));
  alignas(32) float lanes[8];
  float s = 0;
#define TH_SUM(i) _mm256_store_ps(lanes, acc##i); s += lanes[0];
  TH_EACH12(TH_SUM)
#undef TH_SUM
  timing::sink = timing::sink + int64_t(s);
  return macs;
}

// Each thread streams its slice of a buffer far larger than the caches, 32 bytes a load, four
// chains of xors; returns the bytes read.
__attribute__((target("avx2"))) double stream_read(const uint8_t* data, size_t bytes, double seconds) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  double read = 0;
  const auto started = clock_type::now();
  do {
    for (size_t i = 0; i + 128 <= bytes; i += 128) {
      s0 = _mm256_xor_si256(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(data + i)));
      s1 = _mm256_xor_si256(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(data + i + 32)));
      s2 = _mm256_xor_si256(s2, _mm256_load_si256(reinterpret_cast<const __m256i*>(data + i + 64)));
      s3 = _mm256_xor_si256(s3, _mm256_load_si256(reinterpret_cast<const __m256i*>(data + i + 96)));
    }
    read += double(bytes / 128 * 128);
  } while (running(started, seconds));
  const __m256i s = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
  timing::sink = timing::sink + _mm256_extract_epi64(s, 0);
  return read;
}

}  // namespace

volatile int64_t timing::sink = 0;

double timing::rate(size_t threads, double seconds, const std::function<double(double)>& body) {
  std::atomic<size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> counts(threads);
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ++ready;
      while (!go.load()) {
      }
      counts[t] = body(seconds);
    });
  while (ready.load() < threads) {
  }
  const auto started = clock_type::now();
  go = true;
  for (auto& th : pool) th.join();
  const double elapsed = std::chrono::duration<double>(clock_type::now() - started).count();
  double total = 0;
  for (double c : counts) total += c;
  return total / elapsed;
}

double timing::median_of(int runs, const std::function<double()>& f) {
  std::vector<double> v;
  for (int i = 0; i < runs; ++i) v.push_back(f());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double MachineLimits::int8_peak() const { return std::max({int8_vnni512, int8_vnni256, int8_avx2}); }
double MachineLimits::f32_peak() const { return std::max(f32_fma512, f32_fma256); }

MachineLimits measure_machine_limits(size_t threads, int runs, double seconds) {
  MachineLimits m;
  m.threads = threads;
  __builtin_cpu_init();
  const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  auto gmacs = [&](double (*f)(double)) { return median_of(runs, [&] { return rate(threads, seconds, f) / 1e9; }); };
  if (vnni) m.int8_vnni512 = gmacs(vnni512);
  if (vnni && __builtin_cpu_supports("avx512vl")) m.int8_vnni256 = gmacs(vnni256);
  if (__builtin_cpu_supports("avx2")) m.int8_avx2 = gmacs(avx2_int8), m.f32_fma256 = gmacs(fma256);
  if (__builtin_cpu_supports("avx512f")) m.f32_fma512 = gmacs(fma512);
  const ReadBandwidth read(threads);
  m.bandwidth_gbs = median_of(runs, [&] { return read.gbs(seconds); });
  return m;
}

// One slice per thread, written once so that every page is mapped.
ReadBandwidth::ReadBandwidth(size_t threads)
    : threads_(threads), slice_(kBytes / threads / 128 * 128), data_(static_cast<uint8_t*>(std::aligned_alloc(64, kBytes))) {
  if (data_ == nullptr) throw std::bad_alloc();
  for (size_t i = 0; i < kBytes; ++i) data_[i] = uint8_t(i * 131);
}

ReadBandwidth::~ReadBandwidth() { std::free(data_); }

double ReadBandwidth::gbs(double seconds) const {
  std::atomic<size_t> next{0};
  return rate(threads_, seconds, [&](double s) { return stream_read(data_ + (next++) * slice_, slice_, s); }) / 1e9;
}

}  // namespace tokenhost::bench
