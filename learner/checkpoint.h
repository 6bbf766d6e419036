#pragma once
// Checkpoints: a Learner's model (parameters and buffers), optimizer state, epoch and the
// epochs of the fits before (the data order's count) as one pickled dictionary (the format torch.save writes, so Python can read it).
// Files are written atomically: a temporary file beside the target, flushed, then
// renamed over it, so a crash never leaves a half-written checkpoint.
// Loading checks everything before changing anything: a mismatch leaves the
// Learner as it was and names the file and the first mismatched entry.
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fastcpp {

class Learner;

namespace checkpoint {

// Numbers (integers or doubles) a callback keeps with the Learner's state
// (ResumeFromCheckpoint: which fit the checkpoint was saved in, its seed, the trackers'
// best values); empty in a plain save.
using Extras = std::map<std::string, c10::IValue>;

// What a checkpoint file holds (formats/torch_save.h writes it), the tensors on the CPU.
c10::IValue contents(const Learner& learn, bool with_opt, const Extras& extras = {});
// The model, and with_opt the optimizer state where the file holds one. Not strict
// (fastai's strict=False): the model's entries the file lacks keep their values, the
// file's the model lacks are ignored, and an optimizer state that does not fit is left.
void decode_into(Learner& learn, const std::vector<char>& bytes, bool with_opt, const std::string& source,
                 bool strict = true);
// The same from the file's unpickled value.
void decode_into(Learner& learn, const c10::IValue& file, bool with_opt, const std::string& source,
                 bool strict = true);
// Whether a file's unpickled value is a fastcpp checkpoint (it holds the format marker).
bool is_checkpoint(const c10::IValue& file);
// From the file's unpickled value (formats/torch_file.h's unpickle).
Extras extras_of(const c10::IValue& file, const std::string& source);


}  // namespace checkpoint
}  // namespace fastcpp
