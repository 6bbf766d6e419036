#pragma once
// The command line of fastcpp's programs (examples, benchmarks, fastcpp-launch), one way
// for all: CLI11 behind a small interface, so that a program's main reads as what it does.
//
//   fastcpp::CommandLine cli("fashion_mnist", "Trains a residual net on Fashion-MNIST.");
//   int epochs = 5;
//   std::string precision = "fp32";
//   cli.flag("--epochs", epochs, "epochs to train").range(0, 1000);
//   cli.flag("--precision", precision, "training precision").choices({"fp32", "bf16", "fp16"});
//   cli.example("fashion_mnist --epochs 1 --precision bf16");
//   cli.parse(argc, argv);
//
// Every program then answers alike: --help / -h prints what it does, each flag with its
// default and allowed values, and the examples, and exits 0; --version prints fastcpp's
// and libtorch's versions; --flag value and --flag=value both work; an unknown flag, a
// missing or ill-typed value (whole numbers in decimal, 010 is 10; decimals finite, never
// nan), a value out of range or a missing argument is one line
// naming the flag and what was expected, with exit code 2. Nothing else has run by then.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace fastcpp {

class CommandLine {
 public:
  // A declared flag or argument, to narrow what it takes.
  class Flag {
   public:
    Flag& range(double lowest, double highest);
    Flag& choices(std::initializer_list<std::string> allowed);
    Flag& required();

   private:
    friend class CommandLine;
    Flag(void* option, bool integral) : option_(option), integral_(integral) {}
    void* option_;
    bool integral_;  // a whole number: its range is whole too
  };

  CommandLine(std::string program, std::string description);
  ~CommandLine();
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  // --name VALUE (several names: "--nproc-per-node,--nproc_per_node"); `value` holds the
  // default and receives what was given.
  Flag flag(const std::string& names, int& value, const std::string& help);
  Flag flag(const std::string& names, int64_t& value, const std::string& help);
  Flag flag(const std::string& names, double& value, const std::string& help);
  Flag flag(const std::string& names, std::string& value, const std::string& help);
  // A switch without a value: true when given.
  Flag option(const std::string& names, bool& value, const std::string& help);
  // Arguments by position, in the order declared; `values` takes all that remain.
  Flag argument(const std::string& name, std::string& value, const std::string& help);
  Flag arguments(const std::string& name, std::vector<std::string>& values, const std::string& help);
  // Everything after the first argument goes to that argument's program untouched
  // (fastcpp-launch's worker command): read it with rest() after parse.
  void stop_at_first_argument();
  const std::vector<std::string>& rest() const;

  void example(const std::string& command_line);
  // Parses, or exits: 0 after --help or --version, 2 after a bad command line.
  void parse(int argc, const char* const* argv);

  // "fastcpp 0.1.0 (libtorch 2.11.0)".
  static std::string version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fastcpp
