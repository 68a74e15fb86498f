// Linked into test_tsan only (-DTOKENHOST_TSAN=ON). Debian's libcaf_core.so is not instrumented, so
// ThreadSanitizer cannot see that CAF orders everything sent to an actor before the activation that
// reads it, and one activation of an actor before the next (possibly on another worker). These
// wrappers interpose functions of CAF's (the library binds its own calls, virtual ones included,
// through the dynamic symbol table, so the executable's definitions win) and tell TSan:
// - scheduled_actor::launch (spawn hands the new actor to a worker) and ::enqueue release on the actor;
// - ::resume acquires it on entry and releases it on exit, and each message's activation acquires it
//   again and releases it when done (activate, and reactivate, which the mailbox visitor calls for
//   every message a resume takes): a message enqueued while the actor runs is handled in the same
//   resume, a detached actor (an engine's worker, on a private thread) is resumed once and then
//   handles message after message, and resume blocks the mailbox before it returns, after which
//   another worker may resume the actor before the first one's resume has released it;
// - get_normal_queue / get_urgent_queue acquire it: an actor that quits closes its mailbox and then
//   destroys the messages left in it, unhandled, reaching them through these;
// - a blocking actor (a scoped_actor waiting for a reply): enqueue releases on it; dequeue, and its
//   mailbox visitor for each message that receive() takes, acquire it;
// - dropping a strong reference to an actor (intrusive_ptr_release, whose count lives in the library)
//   releases and then acquires on its control block, so that whichever thread drops the last one and
//   destroys the actor comes after every other thread's use (this also orders threads that merely drop
//   references).
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
constexpr const char kInitialize[] = "_ZN3caf15scheduled_actor8activateEPNS_14execution_unitE";
using initialize_fn = bool (*)(void*, void*);
constexpr const char kBlockingEnqueue[] =
    "_ZN3caf14blocking_actor7enqueueESt10unique_ptrINS_15mailbox_elementENS_6detail8disposerEEPNS_14execution_unitE";
constexpr const char kBlockingDequeue[] = "_ZN3caf14blocking_actor7dequeueEv";
using dequeue_fn = void* (*)(void*);
constexpr const char kLaunch[] = "_ZN3caf15scheduled_actor6launchEPNS_14execution_unitEbb";
using launch_fn = void (*)(void*, void*, bool, bool);
constexpr const char kNormalQueue[] = "_ZN3caf15scheduled_actor16get_normal_queueEv";
constexpr const char kUrgentQueue[] = "_ZN3caf15scheduled_actor16get_urgent_queueEv";
using queue_fn = void* (*)(void*);
constexpr const char kReactivate[] = "_ZN3caf15scheduled_actor10reactivateERNS_15mailbox_elementE";
using reactivate_fn = int (*)(void*, void*);
constexpr const char kBlockingVisit[] = "_ZN3caf14blocking_actor15mailbox_visitorclERNS_15mailbox_elementE";
using visit_fn = int (*)(void*, void*);
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
  const int r = original(self, unit, element);
  __tsan_release(self);
  return r;
}

// The actor's first activation (its behavior made): released at once, since resume blocks the mailbox
// before it returns and another worker may then take the actor before resume's exit releases it.
extern "C" bool _ZN3caf15scheduled_actor8activateEPNS_14execution_unitE(void* self, void* unit) {
  static const auto original = next<initialize_fn>(kInitialize);
  const bool r = original(self, unit);
  __tsan_release(self);
  return r;
}

extern "C" void _ZN3caf15scheduled_actor6launchEPNS_14execution_unitEbb(void* self, void* unit, bool lazy, bool hide) {
  static const auto original = next<launch_fn>(kLaunch);
  __tsan_release(self);
  original(self, unit, lazy, hide);
}

// An actor that quits closes its mailbox and destroys the messages left in it, unhandled, reaching them
// through these getters after the close: whoever enqueued them comes before.
extern "C" void* _ZN3caf15scheduled_actor16get_normal_queueEv(void* self) {
  static const auto original = next<queue_fn>(kNormalQueue);
  __tsan_acquire(self);
  return original(self);
}

extern "C" void* _ZN3caf15scheduled_actor16get_urgent_queueEv(void* self) {
  static const auto original = next<queue_fn>(kUrgentQueue);
  __tsan_acquire(self);
  return original(self);
}

extern "C" int _ZN3caf15scheduled_actor10reactivateERNS_15mailbox_elementE(void* self, void* element) {
  static const auto original = next<reactivate_fn>(kReactivate);
  __tsan_acquire(self);
  const int r = original(self, element);
  __tsan_release(self);  // as activate: before resume blocks the mailbox and another worker may resume it
  return r;
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

// The visitor's first member is the blocking actor it consumes messages for (caf/blocking_actor.hpp).
extern "C" int _ZN3caf14blocking_actor15mailbox_visitorclERNS_15mailbox_elementE(void* visitor, void* element) {
  static const auto original = next<visit_fn>(kBlockingVisit);
  __tsan_acquire(*static_cast<void**>(visitor));
  return original(visitor, element);
}

extern "C" void _ZN3caf21intrusive_ptr_releaseEPNS_19actor_control_blockE(void* block) {
  static const auto original = next<release_fn>(kRelease);
  __tsan_release(block);
  __tsan_acquire(block);
  original(block);
}
