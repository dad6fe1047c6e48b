# pROC's DeLong results for every data set of tests/test_reference_proc.py, in one R process.
#
# Usage: Rscript reference_proc.R <data.csv> <out.csv>
#
# data.csv: one row per sample, columns `case`, `paired` (1: compare the two models), `label` (0 / 1), `a`, `b`
# (the two models' scores as C99 hexadecimal floats, exact both ways). For every case: pROC's roc() of model a (and
# b) with levels c(0, 1) and direction "<" fixed (controls are 0, a higher score means a case), auc(),
# ci.auc(method = "delong") and var(method = "delong"); for paired cases roc.test(paired = TRUE, method = "delong").
# out.csv: rows `case,key,value`, the value a hexadecimal float (sprintf "%a"), NA, Inf or -Inf.

suppressPackageStartupMessages(library(pROC))
args <- commandArgs(trailingOnly = TRUE)
data <- read.csv(args[1], colClasses = c("character", "integer", "integer", "character", "character"))
data$a <- as.numeric(data$a)
data$b <- as.numeric(data$b)

rows <- list()
put <- function(case, key, value) {
  rows[[length(rows) + 1]] <<- data.frame(case = case, key = key, value = sprintf("%a", as.numeric(value)))
}
fit <- function(labels, scores) {
  roc(response = labels, predictor = scores, levels = c(0, 1), direction = "<", quiet = TRUE)
}

for (case in unique(data$case)) {
  d <- data[data$case == case, ]
  models <- if (d$paired[1] == 1) c("a", "b") else c("a")
  curves <- list()
  for (model in models) {
    r <- fit(d$label, d[[model]])
    curves[[model]] <- r
    # AUC == 1 makes pROC warn that the interval is 1-1 and the variance 0: expected for the perfect cases
    ci <- suppressWarnings(ci.auc(r, conf.level = 0.95, method = "delong"))
    put(case, paste0("auc_", model), as.numeric(auc(r)))
    put(case, paste0("var_", model), suppressWarnings(var(r, method = "delong")))
    put(case, paste0("lower_", model), ci[1])
    put(case, paste0("upper_", model), ci[3])
  }
  if (d$paired[1] == 1) {
    # pROC stops on some degenerate inputs (a single case: its variance is NaN and `if (NA)` fails): NA then
    test <- tryCatch(
      suppressWarnings(roc.test(curves$a, curves$b, paired = TRUE, method = "delong", conf.level = 0.95)),
      error = function(e) list(statistic = NA, p.value = NA, conf.int = c(NA, NA))
    )
    put(case, "z", test$statistic)
    put(case, "p_value", test$p.value)
    put(case, "diff_lower", test$conf.int[1])
    put(case, "diff_upper", test$conf.int[2])
  }
}
write.csv(do.call(rbind, rows), args[2], row.names = FALSE)
