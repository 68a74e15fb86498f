// Linked into test_tsan only (-DTOKENHOST_TSAN=ON). Debian's libcaf_core.so is not instrumented, so
// ThreadSanitizer cannot see that CAF orders everything sent to an actor before the activation that
// reads it, and one activation of an actor before the next (possibly on another worker). These
// wrappers interpose CAF's scheduled_actor::enqueue, ::resume and ::activate for one message (the
// library binds its own calls through the dynamic symbol table) and tell TSan: enqueue releases on the
// actor; resume acquires it on entry and releases it on exit; each message's activation acquires it
// again (a message enqueued while the actor runs is handled in the same resume). A blocking actor (a
// scoped_actor waiting for a reply): enqueue releases on it, dequeue acquires it. Dropping a strong
// reference to an actor (intrusive_ptr_release, whose count lives in the library) releases and then
// acquires on its control block, so that whichever thread drops the last one and destroys the actor
// comes after every other thread's use (this also orders threads that merely drop references).
#include <dlfcn.h>

#include <cstddef>

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {
template <class F>
F next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}
constexpr const char kResume[] = "_ZN3caf15scheduled_actor6resumeEPNS_14execution_unitEm";
constexpr const char kResumeThunk[] = "_ZThn160_N3caf15scheduled_actor6resumeEPNS_14execution_unitEm";
constexpr const char kEnqueue[] =
    "_ZN3caf15scheduled_actor7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE";
constexpr const char kActivate[] = "_ZN3caf15scheduled_actor8activateEPNS_14execution_unitERNS_15mailbox_elementE";
using activate_fn = int (*)(void*, void*, void*);
constexpr const char kBlockingEnqueue[] =
    "_ZN3caf14blocking_actor7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE";
constexpr const char kBlockingDequeue[] = "_ZN3caf14blocking_actor7dequeueEv";
using dequeue_fn = void* (*)(void*);
constexpr const char kRelease[] = "_ZN3caf21intrusive_ptr_releaseEPNS_19actor_control_blockE";
using release_fn = void (*)(void*);
using resume_fn = int (*)(void*, void*, size_t);
using enqueue_fn = void (*)(void*, void*, void*);
}  // namespace

extern "C" int _ZN3caf15scheduled_actor6resumeEPNS_14execution_unitEm(void* self, void* unit, size_t max) {
  static const auto original = next<resume_fn>(kResume);
  __tsan_acquire(self);
  const int r = original(self, unit, max);
  __tsan_release(self);
  return r;
}

extern "C" int _ZThn160_N3caf15scheduled_actor6resumeEPNS_14execution_unitEm(void* resumable, void* unit, size_t max) {
  static const auto original = next<resume_fn>(kResumeThunk);
  void* self = static_cast<char*>(resumable) - 160;
  __tsan_acquire(self);
  const int r = original(resumable, unit, max);
  __tsan_release(self);
  return r;
}

extern "C" void _ZN3caf15scheduled_actor7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE(
    void* self, void* element, void* unit) {
  static const auto original = next<enqueue_fn>(kEnqueue);
  __tsan_release(self);
  original(self, element, unit);
}

extern "C" int _ZN3caf15scheduled_actor8activateEPNS_14execution_unitERNS_15mailbox_elementE(void* self, void* unit,
                                                                                          void* element) {
  static const auto original = next<activate_fn>(kActivate);
  __tsan_acquire(self);
  return original(self, unit, element);
}

extern "C" void _ZN3caf14blocking_actor7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE(
    void* self, void* element, void* unit) {
  static const auto original = next<enqueue_fn>(kBlockingEnqueue);
  __tsan_release(self);
  original(self, element, unit);
}

extern "C" void* _ZN3caf14blocking_actor7dequeueEv(void* self) {
  static const auto original = next<dequeue_fn>(kBlockingDequeue);
  void* element = original(self);
  __tsan_acquire(self);
  return element;
}

extern "C" void _ZN3caf21intrusive_ptr_releaseEPNS_19actor_control_blockE(void* block) {
  static const auto original = next<release_fn>(kRelease);
  __tsan_release(block);
  __tsan_acquire(block);
  original(block);
}
