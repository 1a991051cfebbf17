// Running a conformance probe: the planned requests, sent in the cases' order, judged by
// the pure functions of conformance_cases.hpp.
#include "idem/http/conformance_probe.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <latch>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "http/conformance_cases.hpp"
#include "http/curl_support.hpp"
#include "http/probe_transport.hpp"
#include "idem/error.hpp"

namespace idem::http {

namespace {

using detail::CaseVerdict;
using detail::send_once;
using detail::SendHooks;

class ProbeRun {
 public:
  ProbeRun(const ProbeOptions& options, const ProbePlan& plan) : options_(options), plan_(plan) {
    report_.url = options.url;
    report_.resources_identified = !options.id_pointer.empty() || !options.id_header.empty();
  }

  ProbeReport run() {
    for (const PlannedCase& planned : plan_.cases) {
      CaseReport out{.id = planned.id, .required = planned.required};
      if (!planned.not_applicable.empty()) {
        out.result = CaseResult::NotApplicable;
        out.reason = planned.not_applicable;
      } else {
        const CaseVerdict verdict = run_case(planned, out.answers);
        out.result = verdict.result;
        out.reason = verdict.reason;
      }
      for (const auto& answer : out.answers) note_resource(planned.id, answer);
      report_.cases.push_back(std::move(out));
    }
    return std::move(report_);
  }

 private:
  CaseVerdict run_case(const PlannedCase& planned, std::vector<ObservedAnswer>& answers) {
    const auto& requests = planned.requests;
    switch (planned.id) {
      case CaseId::FirstRequest:
        answers.push_back(send(requests.at(0)));
        first_ = answers.back();
        return detail::judge_first_request(answers[0], report_.resources_identified);
      case CaseId::Replay:
      case CaseId::ChangedPayload:
        if (!first_ || !detail::succeeded(*first_)) {
          return {CaseResult::NotApplicable, "the first request was not processed"};
        }
        answers.push_back(send(requests.at(0)));
        return planned.id == CaseId::Replay ? detail::judge_replay(*first_, answers[0])
                                            : detail::judge_changed_payload(*first_, answers[0]);
      case CaseId::InFlight: return run_in_flight(requests.at(0), requests.at(1), answers);
      case CaseId::MissingKey:
        answers.push_back(send(requests.at(0)));
        return detail::judge_missing_key(answers[0]);
      case CaseId::MalformedKey:
        for (const auto& r : requests) answers.push_back(send(r));
        return detail::judge_malformed_keys(answers);
      case CaseId::KeyForms:
        answers.push_back(send(requests.at(0)));
        answers.push_back(send(requests.at(1)));
        return detail::judge_key_forms(answers[0], answers[1]);
      case CaseId::ReplayAfter5xx:
        answers.push_back(send(requests.at(0)));
        answers.push_back(send(requests.at(1)));
        return detail::judge_replay_after_5xx(answers[0], answers[1]);
      case CaseId::Concurrency:
        answers = send_in_parallel(requests);
        return detail::judge_concurrency(answers);
      case CaseId::ClientScoping:
        answers.push_back(send(requests.at(0)));
        answers.push_back(send(requests.at(1)));
        return detail::judge_client_scoping(answers[0], answers[1]);
      case CaseId::ProblemDetails: return detail::judge_problem_details(error_answers());
    }
    return {CaseResult::NotApplicable, "unknown case"};
  }

  ObservedAnswer send(const PlannedRequest& request, const SendHooks& hooks = {}) {
    if (options_.on_send) options_.on_send(request);
    ObservedAnswer answer = send_once(request, options_.timeout, hooks);
    answer.resource_id =
        detail::extract_resource_id(answer, options_.id_pointer, options_.id_header);
    std::lock_guard lock(mutex_);
    ++report_.requests_sent;
    return answer;
  }

  // The second request is sent once the first was written whole, and the two overlapped
  // when the second's answer came back before any byte of the first's: the server then
  // had the whole first request and had not answered it. Waiting for "written whole"
  // is a condition signalled from libcurl's debug callback, not a guess at a delay.
  CaseVerdict run_in_flight(const PlannedRequest& first, const PlannedRequest& second,
                            std::vector<ObservedAnswer>& answers) {
    struct Moments {
      std::mutex mutex;
      std::condition_variable changed;
      bool sent = false;
      bool answer_started = false;
      bool done = false;
    } m;
    const SendHooks hooks{.request_sent =
                              [&m] {
                                std::lock_guard lock(m.mutex);
                                m.sent = true;
                                m.changed.notify_all();
                              },
                          .answer_started =
                              [&m] {
                                std::lock_guard lock(m.mutex);
                                m.answer_started = true;
                              }};
    ObservedAnswer first_answer;
    std::thread first_thread([&] {
      try {
        first_answer = send(first, hooks);
      } catch (const std::exception& e) {
        first_answer.label = first.label;
        first_answer.error = e.what();
      }
      std::lock_guard lock(m.mutex);
      m.done = true;
      m.changed.notify_all();
    });
    bool first_pending = false;
    {
      std::unique_lock lock(m.mutex);
      m.changed.wait(lock, [&m] { return m.sent || m.done; });
      first_pending = !m.answer_started && !m.done;
    }
    ObservedAnswer second_answer;
    try {
      second_answer = send(second);
    } catch (...) {
      first_thread.join();
      throw;
    }
    bool overlapped = false;
    {
      std::lock_guard lock(m.mutex);
      overlapped = first_pending && !m.answer_started;
    }
    first_thread.join();
    answers.push_back(std::move(first_answer));
    answers.push_back(std::move(second_answer));
    return detail::judge_in_flight(answers[0], answers[1], overlapped);
  }

  // Every request on a thread of its own, released together.
  std::vector<ObservedAnswer> send_in_parallel(const std::vector<PlannedRequest>& requests) {
    std::vector<ObservedAnswer> answers(requests.size());
    std::latch start(static_cast<std::ptrdiff_t>(requests.size()));
    std::vector<std::thread> threads;
    threads.reserve(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        try {
          answers[i] = send(requests[i]);
        } catch (const std::exception& e) {
          answers[i].label = requests[i].label;
          answers[i].error = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    return answers;
  }

  std::vector<detail::CaseAnswer> error_answers() const {
    std::vector<detail::CaseAnswer> out;
    for (const auto& c : report_.cases) {
      for (const auto& a : c.answers) out.push_back({c.id, &a});
    }
    return out;
  }

  // A 2xx answer names a resource the run made (or was given back): listed once, with
  // the first request that got it, so the user can clean up.
  void note_resource(CaseId id, const ObservedAnswer& answer) {
    if (!detail::succeeded(answer)) return;
    const std::string key = answer.resource_id.empty() ? answer.body : answer.resource_id;
    const bool known = std::any_of(report_.created.begin(), report_.created.end(),
                                   [&](const CreatedResource& r) { return r.id == key; });
    if (!known) report_.created.push_back({key, id, answer.label});
  }

  const ProbeOptions& options_;
  const ProbePlan& plan_;
  std::mutex mutex_;  // requests_sent, counted from the parallel cases' threads
  ProbeReport report_;
  std::optional<ObservedAnswer> first_;
};

}  // namespace

ProbeReport run_probe(const ProbeOptions& options, const ProbePlan& plan) {
  if (plan.request_count() > options.max_requests) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("http-check: the plan needs {} requests, more than --max-requests {}; "
                            "nothing was sent",
                            plan.request_count(), options.max_requests));
  }
  detail::init_curl_once();
  // A URL libcurl cannot use is refused before anything is sent.
  static_cast<void>(detail::parse_http_url(options.url));
  return ProbeRun(options, plan).run();
}

}  // namespace idem::http
