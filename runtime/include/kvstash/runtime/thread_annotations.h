// Clang's thread-safety annotations (-Wthread-safety), as abseil's
// thread_annotations.h spells them, and a std::mutex that clang knows is a
// capability. Under gcc the annotations are nothing; the clang build of the
// server and client libraries (scripts/thread_safety.sh, in CI) checks them:
// a member KVSTASH_GUARDED_BY(mutex_) touched without holding mutex_ does
// not compile there.
#pragma once

#include <mutex>

#if defined(__clang__)
#define KVSTASH_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVSTASH_THREAD_ANNOTATION(x)
#endif

#define KVSTASH_CAPABILITY(name) KVSTASH_THREAD_ANNOTATION(capability(name))
#define KVSTASH_SCOPED_CAPABILITY KVSTASH_THREAD_ANNOTATION(scoped_lockable)
#define KVSTASH_GUARDED_BY(mutex) KVSTASH_THREAD_ANNOTATION(guarded_by(mutex))
#define KVSTASH_PT_GUARDED_BY(mutex) KVSTASH_THREAD_ANNOTATION(pt_guarded_by(mutex))
#define KVSTASH_REQUIRES(...) KVSTASH_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define KVSTASH_EXCLUDES(...) KVSTASH_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define KVSTASH_ACQUIRE(...) KVSTASH_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define KVSTASH_RELEASE(...) KVSTASH_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define KVSTASH_NO_THREAD_SAFETY_ANALYSIS KVSTASH_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace kvstash {

// A std::mutex that -Wthread-safety can reason about (libstdc++'s carries no
// annotations). Lock it with MutexLock.
class KVSTASH_CAPABILITY("mutex") Mutex {
 public:
  void lock() KVSTASH_ACQUIRE() { mutex_.lock(); }
  void unlock() KVSTASH_RELEASE() { mutex_.unlock(); }
  // For MutexLock only.
  std::mutex& native() { return mutex_; }

 private:
  std::mutex mutex_;
};

// Holds a Mutex for its scope. native() is the std::unique_lock that
// std::condition_variable waits on (a wait gives the mutex up and takes it
// back before it returns, so the scope still holds it after).
class KVSTASH_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) KVSTASH_ACQUIRE(mutex) KVSTASH_NO_THREAD_SAFETY_ANALYSIS
      : lock_(mutex.native()) {}
  ~MutexLock() KVSTASH_RELEASE() KVSTASH_NO_THREAD_SAFETY_ANALYSIS {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace kvstash
