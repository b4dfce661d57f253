# loss.png: training and validation loss and accuracy of `qkv train`.
# Variables: infile (out/train.csv), outfile. Columns are read by name.
load dir."/common.gp"
set output outfile
set multiplot layout 1,2 title "qkv train：学习 他 → 小明（损失与准确率）" font ",16"
set xlabel "训练步数 (step)"
set ylabel "交叉熵损失 (log)"
set logscale y
set format y "10^{%L}"
set key top right
plot infile using "step":"train_loss" \
         with linespoints lw 2 pt 7 ps 0.6 lc rgb c_scaled title "训练损失 train", \
     infile using "step":"val_loss" \
         with linespoints lw 2 pt 5 ps 0.6 lc rgb c_unscaled title "验证损失 val"
unset logscale y
set format y "%g"
set ylabel "准确率 / 注意力权重"
set yrange [0:1.05]
set key bottom right
plot infile using "step":"train_acc" \
         with linespoints lw 2 pt 7 ps 0.6 lc rgb c_scaled title "训练准确率", \
     infile using "step":"val_acc" \
         with linespoints lw 2 pt 5 ps 0.6 lc rgb c_unscaled title "验证准确率", \
     infile using "step":"attn_antecedent" with lines lw 2 dt 2 lc rgb "#2ca02c" title "代词对先行词的注意力"
unset multiplot
