"""Published experiments rerun in kvsim: the paper's numbers as data (`paper`), the runs that measure ours
(`experiments`, `run`), the comparison (`checks`) and its presentation (`report`); `explore` holds the small
experiments the notebooks call."""
