// tbcollGroupStart / tbcollGroupEnd: what a thread records between them, and how the outermost end runs it.
#include <algorithm>
#include <exception>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "c_api_internal.h"

namespace tbcoll::c_api {
namespace {

// One communicator's part of a group.
struct Member {
  tbcollComm_t comm = nullptr;
  bool point_to_point = false;  ///< its Communicator records sends and receives (group_start was called)
  std::vector<std::function<void(tbcoll::Communicator&)>> collectives;
};

// A communicator to create at the end of the group.
struct Creation {
  tbcollComm_t* out = nullptr;
  std::function<tbcoll::Communicator()> make;
};

struct Group {
  int depth = 0;
  std::vector<Member> members;  ///< in the order the communicators joined
  std::vector<Creation> creations;
};

thread_local Group group;

// Every communicator in this thread's group holds a reference until the group ends (or it leaves the group), so
// tbcollCommAbort or tbcollCommDestroy from another thread does not free it while tbcollGroupEnd still has to
// reach it.
Member& member(tbcollComm_t comm) {
  for (Member& m : group.members) {
    if (m.comm == comm) return m;
  }
  retain(comm);
  group.members.push_back(Member{comm, false, {}});
  return group.members.back();
}

// What a communicator does at the end: its sends and receives together (each rank's in one batch, so their order
// does not matter), then its collectives in the order they were called (the same on every rank, as outside a
// group). Every rank runs its group in this order, so none waits for a call its peers run later.
void finish(Member& m) {
  Release leave{m.comm};  // the reference member() took
  if (m.point_to_point) counted(m.comm, [](tbcoll::Communicator& c) { c.group_end(); });
  for (auto& body : m.collectives) counted(m.comm, body);
}

// Runs the tasks at once, the first on this thread and the others on threads of their own, and waits for all;
// throws the first task's error (in task order) if any failed.
void run_together(std::vector<std::function<void()>>& tasks) {
  std::vector<std::exception_ptr> errors(tasks.size());
  auto run = [&](size_t i) {
    try {
      tasks[i]();
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < tasks.size(); ++i) threads.emplace_back(run, i);
  if (!tasks.empty()) run(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace

bool in_group() { return group.depth > 0; }

void refuse_in_group(const char* call) {
  if (in_group()) {
    throw tbcoll::InvalidUsage(fmt::format(
        "{} inside tbcollGroupStart/End: groups take collectives, sends, receives and communicator creations",
        call));
  }
}

bool defer_collective(tbcollComm_t comm, std::function<void(tbcoll::Communicator&)> body) {
  if (!in_group()) return false;
  counted(comm, [](tbcoll::Communicator&) {});  // a NULL or destroyed handle is refused now
  member(comm).collectives.push_back(std::move(body));
  return true;
}

bool defer_init(tbcollComm_t* out, std::function<tbcoll::Communicator()> make) {
  if (!in_group()) return false;
  group.creations.push_back(Creation{out, std::move(make)});
  return true;
}

void join_group(tbcollComm_t comm) {
  if (!in_group() || comm == nullptr) return;
  Member& m = member(comm);
  if (m.point_to_point) return;
  comm->communicator->group_start();
  m.point_to_point = true;
}

void leave_group(tbcollComm_t comm) {
  auto at = std::find_if(group.members.begin(), group.members.end(), [&](const Member& m) { return m.comm == comm; });
  if (at == group.members.end()) return;
  group.members.erase(at);
  release(comm);
}

}  // namespace tbcoll::c_api

using namespace tbcoll::c_api;

extern "C" {

tbcollResult_t tbcollGroupStart(void) {
  return guarded([&] { ++group.depth; });
}

tbcollResult_t tbcollGroupEnd(void) {
  return guarded([&] {
    if (group.depth == 0) throw tbcoll::InvalidUsage("tbcollGroupEnd without tbcollGroupStart");
    if (--group.depth > 0) return;
    std::vector<Member> members = std::move(group.members);
    std::vector<Creation> creations = std::move(group.creations);
    group = Group{};
    // Every member finishes (and drops its reference), even after another failed; the first error is reported.
    std::vector<std::function<void()>> tasks;
    for (Creation& creation : creations) {
      tasks.push_back([&creation] { *creation.out = new_handle(creation.make()); });
    }
    for (Member& m : members) tasks.push_back([&m] { finish(m); });
    run_together(tasks);
  });
}

}  // extern "C"
