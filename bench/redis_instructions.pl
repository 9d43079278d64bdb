#!/usr/bin/perl
# What a decision costs Redis in instructions: a steady figure where the
# wall clock of a shared machine is not.  For each case, a redis-server of
# its own under valgrind --tool=callgrind, counting only inside FCALL and
# EVALSHA (--toggle-collect), is given the module's library (FUNCTION LOAD)
# and script (SCRIPT LOAD) built from core/src/redis/ratelimit.lua as
# embed.sh builds them, then batches of decisions as the module sends them
# (a random key among 100,000 a request, limits that never refuse, the
# specs of bench/redis.pl's locations); the instructions over the
# decisions.  The argument lists are built before Redis starts, so that the
# count is Redis's alone.  With --time, the same calls go to a plain
# redis-server instead, and the figure is its time a decision (INFO
# commandstats: the FCALL's or EVALSHA's usec over its decisions), which a
# shared machine's load moves.
#
#   bench/redis_instructions.pl [--batches 200] [--time]
use strict;
use warnings;
use FindBin;
use Getopt::Long;
use IO::Socket::INET;
use Time::HiRes qw(sleep);

my ($batches, $time) = (200, 0);
GetOptions('batches=i' => \$batches, 'time' => \$time) or die "usage: $0 [--batches N] [--time]\n";
my $root = "$FindBin::Bin/..";

sub slurp { local (@ARGV, $/) = @_; <> }

# the script with its algorithms' names, as embed.sh writes it
my $header = slurp("$root/core/include/ratelimit_rule.h");
my ($enum) = $header =~ /^enum rl_algorithm \{(.*?)RL_ALGORITHM_COUNT/ms or die "no enum rl_algorithm\n";
my @names = map { lc } $enum =~ /^\s*RL_([A-Z_]+)/mg;
my %number = map { $names[$_] => $_ } 0 .. $#names;
my $script = slurp("$root/core/src/redis/ratelimit.lua");
my $list = join ', ', map { ($_ ? '' : '[0] = ') . "'$names[$_]'" } 0 .. $#names;
$script =~ s/^local ALGORITHM_NAMES = \{\}.*$/local ALGORITHM_NAMES = {$list}/m;
my $body = substr($script, 0, index($script, "\n-- ---- as a script (EVAL, EVALSHA)") + 1);
my $library = "#!lua name=ratelimit_bench\n${body}redis.register_function('ratelimit_bench', run)\n";

# a rule's spec (rl_redis_command's): algorithm limit burst period align
# buckets max_delay reset utc_offset delay ban charge lease
sub spec { my ($alg, $limit, $period, $charge) = @_; "$number{$alg} $limit $limit $period 0 10 0 0 0 0 0 $charge 0" }
my %stacks = (
    gcra => [ spec('gcra', 1_000_000_000, 1000, 0) ],
    fixed_window => [ spec('fixed_window', 1_000_000_000, 10_000, 0) ],
    'gcra+sliding_window+quota' => [ spec('gcra', 1_000_000_000, 1000, 0),
        spec('sliding_window', 100_000_000, 3_600_000, 0), spec('quota', 100_000_000, 86_400_000, 0) ],
    'gcra charge=' => [ spec('gcra', 1_000_000_000, 1000, 1) ],
);

sub command {
    my $out = '*' . @_ . "\r\n";
    $out .= '$' . length($_) . "\r\n$_\r\n" for @_;
    return $out;
}

sub reply {
    my ($s) = @_;
    my $line = <$s> // die "redis: no reply\n";
    my ($type, $rest) = (substr($line, 0, 1), substr($line, 1, -2));
    die "redis: $rest\n" if $type eq '-';
    return $rest if $type eq '+' || $type eq ':';
    if ($type eq '$') {
        return undef if $rest < 0;
        read($s, my $v, $rest + 2);
        return substr($v, 0, -2);
    }
    return [ map { reply($s) } 1 .. $rest ];
}

# the calls of a case: $per decisions a call, via FCALL or EVALSHA
sub calls {
    my ($stack, $per, $via, $sha) = @_;
    my $rules = $stacks{$stack};
    srand(1);
    my @calls;
    for (1 .. $batches) {
        my (@keys, @args);
        for (1 .. $per) {
            my $k = sprintf('bench:%032x', int(rand(100_000)));
            push @keys, map { "$k:$_" } 0 .. $#$rules;
            push @keys, "$k:flight" if $stack =~ /charge/;
            push @args, 0, scalar @$rules;
            push @args, $_, ($stack =~ /charge/ ? '1 1 0 0' : 1) for @$rules;
        }
        my @name = $via eq 'FCALL' ? ('FCALL', 'ratelimit_bench') : ('EVALSHA', $sha);
        # one decision a call: the call of one request (its call and rules)
        push @calls, $per == 1 ? command(@name, scalar @keys, @keys, '', $args[0], @args[2 .. $#args])
                               : command(@name, scalar @keys, @keys, '', 'batch', @args);
    }
    return \@calls;
}

sub sha1_of {
    my ($text) = @_;
    open(my $fh, '|-', "sha1sum > /tmp/redis_instructions.$$") or die;
    print $fh $text;
    close $fh;
    my ($sha) = split ' ', slurp("/tmp/redis_instructions.$$");
    unlink "/tmp/redis_instructions.$$";
    return $sha;
}
my $sha = sha1_of($script);

sub instructions {
    my ($stack, $per, $via) = @_;
    my $calls = calls($stack, $per, $via, $sha);
    my $port = 20000 + $$ % 20000;
    my $out = "/tmp/redis_instructions.$$.out";
    my $pid = fork // die;
    if (!$pid) {
        open(STDOUT, '>', '/dev/null');
        open(STDERR, '>', '/dev/null');
        my @redis = ('redis-server', '--port', $port, '--save', '', '--appendonly', 'no');
        exec(@redis) if $time;
        exec('valgrind', '--tool=callgrind', "--callgrind-out-file=$out", '--toggle-collect=fcallCommand',
             '--toggle-collect=evalShaCommand', @redis);
    }
    my $s;
    for (1 .. 200) { last if $s = IO::Socket::INET->new("127.0.0.1:$port"); sleep 0.1 }
    $s or die "redis-server under valgrind did not start\n";
    print $s command('FUNCTION', 'LOAD', $library);
    reply($s);
    print $s command('SCRIPT', 'LOAD', $script);
    reply($s) eq $sha or die "SCRIPT LOAD: another SHA-1\n";
    for my $call (@$calls) {
        print $s $call;
        my $answers = reply($s);
        die "$stack: " . scalar(@$answers) . " answers to $per decisions\n"
            unless $per == 1 || (ref $answers && @$answers == $per);
    }
    print $s command('INFO', 'commandstats');
    my ($usec) = reply($s) =~ /^cmdstat_(?:fcall|evalsha):calls=\d+,usec=(\d+)/m;
    print $s command('SHUTDOWN', 'NOSAVE');
    waitpid($pid, 0);
    return $usec / ($batches * $per) if $time;
    my ($total) = `callgrind_annotate $out 2>/dev/null` =~ /^([\d,]+)\s.*PROGRAM TOTALS/m or die "no callgrind total\n";
    unlink $out;
    $total =~ tr/,//d;
    return $total / ($batches * $per);
}

printf "redis %s a decision: %s, %s, %d calls a case, a random key of 100,000 a request%s\n",
    $time ? 'us' : 'instructions', (`redis-server --version` =~ /(v=\S+)/)[0],
    $time ? 'INFO commandstats of FCALL and EVALSHA' : 'callgrind inside FCALL and EVALSHA', $batches,
    $time ? sprintf('; load average %s', (split ' ', slurp('/proc/loadavg'))[0]) : '';
for my $case ([ 'gcra', 16, 'FCALL' ], [ 'gcra', 16, 'EVALSHA' ], [ 'gcra', 1, 'FCALL' ], [ 'gcra', 1, 'EVALSHA' ],
              [ 'fixed_window', 16, 'FCALL' ], [ 'gcra+sliding_window+quota', 16, 'FCALL' ],
              [ 'gcra charge=', 16, 'FCALL' ]) {
    printf $time ? "  %-28s %-8s %2d a call: %8.2f\n" : "  %-28s %-8s %2d a call: %8.0f\n", @$case[0, 2, 1],
        instructions(@$case);
}
