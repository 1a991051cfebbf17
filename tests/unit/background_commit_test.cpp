// BackgroundCommit as a plain class: the job runs on its own thread, done() and the wake
// callback say when it returned, wait() hands back what it threw, and the destructor
// lets a job in flight finish.
#include "consumer/batch/background_commit.hpp"

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

namespace background_commit_test {

using idem::detail::BackgroundCommit;

TEST(BackgroundCommit, RunsTheJobOnItsOwnThreadAndSaysWhenItReturned) {
  std::atomic<int> wakes{0};
  BackgroundCommit commit([&] { ++wakes; });
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::thread::id ran_on;
  commit.start([&] {
    ran_on = std::this_thread::get_id();
    released.wait();  // the "COMMIT" waits until the test lets it return
  });
  EXPECT_FALSE(commit.done().load()) << "done before the job returned";
  release.set_value();
  commit.wait();
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(wakes.load(), 1);
  EXPECT_FALSE(commit.done().load()) << "wait() clears done() for the next job";

  commit.start([] {});
  commit.wait();
  EXPECT_EQ(wakes.load(), 2);
}

TEST(BackgroundCommit, WaitRethrowsWhatTheJobThrewOnce) {
  BackgroundCommit commit({});
  commit.start([] { throw std::runtime_error("the store refused the COMMIT"); });
  EXPECT_THROW(commit.wait(), std::runtime_error);
  EXPECT_NO_THROW(commit.wait()) << "the error belongs to the job that threw it";

  commit.start([] { throw std::runtime_error("dropped"); });
  commit.wait_quietly();
  EXPECT_NO_THROW(commit.wait());
}

TEST(BackgroundCommit, TheDestructorLetsTheJobInFlightFinish) {
  std::atomic<bool> finished{false};
  std::promise<void> started;
  {
    BackgroundCommit commit({});
    commit.start([&] {
      started.set_value();
      std::this_thread::yield();
      finished = true;
    });
    started.get_future().wait();
  }
  EXPECT_TRUE(finished.load());
}

}  // namespace background_commit_test
