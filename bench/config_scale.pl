#!/usr/bin/perl
# Configuration size: what a configuration of many locations, each with one
# rule, costs in memory and in time, for ratelimit and for limit_req, and
# for the same locations with no rule (the floor both share).
#
# For 100, 1,000 and 10,000 locations (a tenant each), three configurations
# are generated: the locations alone; one ratelimit_zone and a `ratelimit`
# rule a location (its own limit, period and name; the key alternately
# $binary_remote_addr and a header); one limit_req_zone and `limit_req` a
# location.  For each: the master's and one worker's resident memory
# (VmRSS, and Pss from smaps_rollup) once it listens, the median of several
# `nginx -t`, and the median of several reloads (HUP until every worker is
# a new one).
#
#   bench/config_scale.pl [--sizes 100,1000,10000] [--runs 5]
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/../t/lib", "$FindBin::Bin/lib";
use Getopt::Long;
use Time::HiRes qw(time sleep);
use RLTest;
use RLBench qw(median);

my $sizes = '100,1000,10000';
my $runs = 5;
GetOptions('sizes=s' => \$sizes, 'runs=i' => \$runs)
    or die "usage: $0 [--sizes N,N,...] [--runs N]\n";
my @sizes = split /,/, $sizes;

# The http {} body of n locations, each with the kind's rule.
sub body {
    my ($kind, $n) = @_;
    my $text = '';
    $text .= "ratelimit_zone tenants 10m;\n" if $kind eq 'ratelimit';
    $text .= "limit_req_zone \$binary_remote_addr zone=tenants:10m rate=100r/s;\n" if $kind eq 'limit_req';
    $text .= "server {\n    listen 127.0.0.1:%%PORT%%;\n    location / { }\n";
    for my $i (1 .. $n) {
        my $rule = '';
        if ($kind eq 'ratelimit') {
            my $key = $i % 2 ? '$binary_remote_addr' : '$http_x_api_key';
            my $period = (1, 10, 60)[$i % 3] . 's';
            $rule = sprintf 'ratelimit zone=tenants key=%s limit=%d period=%s name=tenant%d;',
                $key, 10 + $i % 1000, $period, $i;
        } elsif ($kind eq 'limit_req') {
            $rule = 'limit_req zone=tenants burst=5;';
        }
        $text .= "    location /t$i/ { $rule }\n";
    }
    return $text . "}\n";
}

# kB of a line of a /proc file.
sub field {
    my ($file, $name) = @_;
    return RLTest::read_file($file) =~ /^$name:\s+(\d+) kB/m ? $1 : 0;
}

sub memory {
    my ($pid) = @_;
    return (field("/proc/$pid/status", 'VmRSS'), field("/proc/$pid/smaps_rollup", 'Pss'));
}

sub until_true {
    my ($cond) = @_;
    my $end = time + 60;
    while (time < $end) {
        return 1 if $cond->();
        sleep 0.002;
    }
    die "config_scale: timed out\n";
}

my %row;
for my $n (@sizes) {
    for my $kind ('locations', 'limit_req', 'ratelimit') {
        my $t = RLTest->new(quiet => 1);
        my $text = $t->write_conf(body($kind, $n), no_access_log => 1, log_level => 'warn');
        my @test;
        for (1 .. $runs) {
            my $t0 = time;
            my ($rc, $out) = $t->nginx_t($text);
            push @test, time - $t0;
            die "config_scale: nginx -t of $kind $n failed:\n$out" if $rc;
        }
        $t->start();
        until_true(sub { my @w = $t->worker_pids; @w == 1 });
        sleep 0.5;   # the worker's start done (its init_process)
        my ($worker) = $t->worker_pids;
        my @master = memory($t->master_pid);
        my @worker = memory($worker);
        my @reload;
        for (1 .. $runs) {
            my %old = map { $_ => 1 } $t->worker_pids;
            my $t0 = time;
            $t->signal('HUP');
            until_true(sub { my @now = $t->worker_pids; @now && !grep { $old{$_} } @now });
            push @reload, time - $t0;
        }
        $t->stop();
        $row{$n}{$kind} = {
            test => median(@test) * 1000, reload => median(@reload) * 1000,
            master => $master[0], master_pss => $master[1], worker => $worker[0], worker_pss => $worker[1],
        };
        printf STDERR "  %6d %-10s master %7d kB  worker %7d kB  nginx -t %7.1f ms  reload %7.1f ms\n",
            $n, $kind, $master[0], $worker[0], $row{$n}{$kind}{test}, $row{$n}{$kind}{reload};
    }
}

printf "configuration size: n locations, each with one rule (medians of %d nginx -t, of %d reloads)\n", $runs, $runs;
printf "%7s %-10s %10s %10s %10s %10s %10s %10s\n", 'n', 'kind', 'master kB', 'Pss kB', 'worker kB', 'Pss kB',
    'nginx -t', 'reload';
for my $n (@sizes) {
    for my $kind ('locations', 'limit_req', 'ratelimit') {
        my $r = $row{$n}{$kind};
        printf "%7d %-10s %10d %10d %10d %10d %8.1fms %8.1fms\n", $n, $kind, @$r{qw(master master_pss worker
            worker_pss)}, $r->{test}, $r->{reload};
    }
    my ($l, $q) = ($row{$n}{limit_req}, $row{$n}{ratelimit});
    printf "%7d ratelimit - limit_req: master %+d kB (%+.0f B a rule), worker %+d kB (%+.0f B a rule);"
        . " nginx -t %.2fx, reload %.2fx\n", $n, $q->{master} - $l->{master},
        ($q->{master} - $l->{master}) * 1024 / $n, $q->{worker} - $l->{worker},
        ($q->{worker} - $l->{worker}) * 1024 / $n, $q->{test} / $l->{test}, $q->{reload} / $l->{reload};
}
