#include "cli/command_line.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

namespace fastcpp {

struct CommandLine::Impl {
  Impl(std::string program_, std::string description) : program(std::move(program_)), app(std::move(description), program) {}
  std::string program;
  CLI::App app;
  std::vector<std::string> examples, rest;
};

namespace {

CLI::Option* option_of(void* option) { return static_cast<CLI::Option*>(option); }

// A whole number in decimal (010 is 10): CLI11 alone reads 010 as octal 8 and 0x10 as 16.
CLI::Validator whole_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+');
        const auto digits = text.substr(sign);
        if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
          return "'" + text + "' is not a whole number";
        const auto first = std::min(digits.find_first_not_of('0'), digits.size() - 1);  // leading zeros go
        text = text.substr(0, sign) + digits.substr(first);
        return "";
      },
      "");
}

// A finite number: "nan" and "inf" read as numbers, and would pass any range.
CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || text.find_first_of("xX") != std::string::npos)  // no hex
          return "'" + text + "' is not a number";
        if (!std::isfinite(value)) return "'" + text + "' is not a finite number";
        return "";
      },
      "");
}

}  // namespace

CommandLine::Flag& CommandLine::Flag::range(double lowest, double highest) {
  if (integral_)
    option_of(option_)->check(CLI::Range(static_cast<int64_t>(lowest), static_cast<int64_t>(highest)));
  else
    option_of(option_)->check(CLI::Range(lowest, highest));
  return *this;
}

CommandLine::Flag& CommandLine::Flag::choices(std::initializer_list<std::string> allowed) {
  option_of(option_)->check(CLI::IsMember(std::vector<std::string>(allowed)));
  return *this;
}

CommandLine::Flag& CommandLine::Flag::required() {
  option_of(option_)->required();
  return *this;
}

CommandLine::CommandLine(std::string program, std::string description)
    : impl_(std::make_unique<Impl>(std::move(program), std::move(description))) {
  impl_->app.set_version_flag("--version", version(), "print fastcpp's and libtorch's versions and exit");
  impl_->app.get_formatter()->column_width(34);
}

CommandLine::~CommandLine() = default;

CommandLine::Flag CommandLine::flag(const std::string& names, int& value, const std::string& help) {
  return Flag(impl_->app.add_option(names, value, help)->capture_default_str()->transform(whole_number()), true);
}

CommandLine::Flag CommandLine::flag(const std::string& names, int64_t& value, const std::string& help) {
  return Flag(impl_->app.add_option(names, value, help)->capture_default_str()->transform(whole_number()), true);
}

CommandLine::Flag CommandLine::flag(const std::string& names, double& value, const std::string& help) {
  return Flag(impl_->app.add_option(names, value, help)->capture_default_str()->transform(finite_number()), false);
}

CommandLine::Flag CommandLine::flag(const std::string& names, std::string& value, const std::string& help) {
  return Flag(impl_->app.add_option(names, value, help)->capture_default_str(), false);
}

CommandLine::Flag CommandLine::option(const std::string& names, bool& value, const std::string& help) {
  return Flag(impl_->app.add_flag(names, value, help), false);
}

CommandLine::Flag CommandLine::argument(const std::string& name, std::string& value, const std::string& help) {
  return Flag(impl_->app.add_option(name, value, help), false);
}

CommandLine::Flag CommandLine::arguments(const std::string& name, std::vector<std::string>& values,
                                         const std::string& help) {
  return Flag(impl_->app.add_option(name, values, help), false);
}

void CommandLine::stop_at_first_argument() { impl_->app.prefix_command(); }

const std::vector<std::string>& CommandLine::rest() const { return impl_->rest; }

void CommandLine::example(const std::string& command_line) { impl_->examples.push_back(command_line); }

void CommandLine::parse(int argc, const char* const* argv) {
  auto& app = impl_->app;
  if (!impl_->examples.empty()) {
    std::string footer = impl_->examples.size() == 1 ? "Example:" : "Examples:";
    for (const auto& example : impl_->examples) footer += "\n  " + example;
    app.footer(footer + "\n");
  }
  try {
    app.parse(argc, argv);
    // Stopped at the first argument: a flag of ours misspelt must not become the command.
    const auto rest = app.remaining();
    // (CLI11 keeps a "--" that ends our flags as the first of the rest.)
    if (app.get_prefix_command() && !rest.empty() && rest.front() != "--" && rest.front().size() > 1 &&
        rest.front()[0] == '-')
      throw CLI::ExtrasError({rest.front()});
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    std::exit(0);
  } catch (const CLI::CallForVersion&) {
    std::cout << version() << "\n";
    std::exit(0);
  } catch (const CLI::ParseError& e) {
    std::cerr << impl_->program << ": " << e.what() << " (" << impl_->program << " --help lists the flags)\n";
    std::exit(2);
  }
  impl_->rest = app.remaining();
  if (!impl_->rest.empty() && impl_->rest.front() == "--") impl_->rest.erase(impl_->rest.begin());
}

std::string CommandLine::version() { return "fastcpp " FASTCPP_VERSION " (libtorch " FASTCPP_TORCH_VERSION ")"; }

}  // namespace fastcpp
