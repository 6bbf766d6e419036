#pragma once
// fastcpp: one include for a training program.
#include <torch/torch.h>

#include "callbacks/logging.h"
#include "callbacks/lr_finder.h"
#include "callbacks/progress.h"
#include "callbacks/schedule.h"
#include "callbacks/tracker.h"
#include "callbacks/training.h"
#include "data/batch_transforms.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "learner/callback.h"
#include "learner/checkpoint.h"
#include "learner/error.h"
#include "learner/events.h"
#include "learner/learner.h"
#include "learner/loss.h"
#include "learner/lrs.h"
#include "learner/metrics.h"
#include "learner/model.h"
#include "learner/optimizers.h"
#include "learner/recorder.h"
#include "learner/schedules.h"
#include "data/random.h"
#include "data/sampler.h"
#include "vision/idx.h"
#if FASTCPP_HAS_OPENCV
#include "vision/image.h"
#include "vision/image_folder.h"
#include "vision/transforms.h"
#endif
