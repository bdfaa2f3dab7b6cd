// A queue from ordinary threads to one coroutine: producers Push from any thread (a blocking
// command runner, a shim reader); the consumer coroutine awaits Pop on its own executor (a
// connection's strand). Bounded: Push blocks the producer while `capacity` items wait, so a slow
// client slows the producer instead of growing memory. Close ends the stream (Pop then returns
// nullopt once drained); Abandon tells producers the consumer has gone (Push returns false).
#ifndef AIRLOCK_HTTP_STREAM_QUEUE_H_
#define AIRLOCK_HTTP_STREAM_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "boost/asio/any_io_executor.hpp"
#include "boost/asio/awaitable.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/redirect_error.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/use_awaitable.hpp"

namespace airlock::http {

template <typename T>
class StreamQueue : public std::enable_shared_from_this<StreamQueue<T>> {
 public:
  // `executor` must be the consumer coroutine's (a strand), so wake-ups are serialised with it.
  StreamQueue(boost::asio::any_io_executor executor, size_t capacity)
      : timer_(executor), capacity_(capacity) {
    timer_.expires_at(boost::asio::steady_timer::time_point::max());
  }

  // Blocks while the queue is full. False when the consumer abandoned the stream.
  bool Push(T item) {
    {
      std::unique_lock lock(mu_);
      space_.wait(lock, [&] { return abandoned_ || items_.size() < capacity_; });
      if (abandoned_) return false;
      items_.push_back(std::move(item));
    }
    Wake();
    return true;
  }

  void Close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    Wake();
  }

  void Abandon() {
    {
      std::lock_guard lock(mu_);
      abandoned_ = true;
      items_.clear();
    }
    space_.notify_all();
  }

  bool abandoned() const {
    std::lock_guard lock(mu_);
    return abandoned_;
  }

  // The next item, or nullopt once closed and drained.
  boost::asio::awaitable<std::optional<T>> Pop() {
    co_return co_await PopOr(std::nullopt, boost::asio::steady_timer::duration::max());
  }

  // Like Pop, but `idle_item` when nothing has come for `idle` (a keep-alive for the consumer
  // to send).
  boost::asio::awaitable<std::optional<T>> PopOr(std::optional<T> idle_item,
                                                 boost::asio::steady_timer::duration idle) {
    using Clock = boost::asio::steady_timer::clock_type;
    const Clock::time_point deadline =
        idle == Clock::duration::max() ? Clock::time_point::max() : Clock::now() + idle;
    for (;;) {
      {
        std::lock_guard lock(mu_);
        if (!items_.empty()) {
          T item = std::move(items_.front());
          items_.pop_front();
          space_.notify_one();
          co_return item;
        }
        if (closed_) co_return std::nullopt;
      }
      if (Clock::now() >= deadline) co_return idle_item;
      // Set here, on the consumer's strand, just before the wait: Wake's cancel cannot fall
      // between the two.
      timer_.expires_at(deadline);
      boost::system::error_code ec;
      co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      timer_.expires_at(boost::asio::steady_timer::time_point::max());
    }
  }

 private:
  void Wake() {
    // Runs on the consumer's strand, so it either finds the consumer waiting (and wakes it) or
    // runs before the consumer looks at the queue again.
    boost::asio::post(timer_.get_executor(),
                      [self = this->shared_from_this()] { self->timer_.cancel(); });
  }

  mutable std::mutex mu_;
  std::condition_variable space_;
  std::deque<T> items_;
  boost::asio::steady_timer timer_;
  size_t capacity_;
  bool closed_ = false;
  bool abandoned_ = false;
};

}  // namespace airlock::http

#endif  // AIRLOCK_HTTP_STREAM_QUEUE_H_
