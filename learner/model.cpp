#include "learner/model.h"

#include <c10/util/Exception.h>

#include "core/error.h"

namespace fastcpp {

Model Model::replicate(const torch::Device& device) const {
  const std::string what = "cannot copy the model (" + module_->name() + ") onto " + device.str() + ": ";
  if (!replicate_) throw Error(what + "it was given as a module and a forward function; give the module itself");
  try {
    return replicate_(*module_, device);
  } catch (const c10::Error& e) {  // libtorch names the module that is not Cloneable
    const std::string message = e.what_without_backtrace();
    throw Error(what + message.substr(0, message.find('\n')));
  }
}

}  // namespace fastcpp
