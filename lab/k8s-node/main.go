// Command k8s-node is kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kubectl in one binary (as Kubernetes' own cmd/genkubedocs links
// these app packages together), so a whole one-node cluster fits the GPU
// machine's 64 MiB carry. It runs the program its name says (a symbolic link
// named kubelet, ...) or the one named by its first argument:
//
//	k8s-node kubelet --config ...   or   ln -s k8s-node kubelet; kubelet --config ...
//
// Built by lab/pack-k8s-node.sh.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	_ "time/tzdata" // CronJob time zones (kube-apiserver, kube-controller-manager)

	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's client auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var programs = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := programs[name]; !ok && name != "kubectl" {
		if len(os.Args) < 2 {
			usage()
		}
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	if name == "kubectl" {
		// As cmd/kubectl's main: verbosity first, then the command.
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCommand, ok := programs[name]
	if !ok {
		usage()
	}
	os.Exit(cli.Run(newCommand()))
}

func usage() {
	names := []string{"kubectl"}
	for n := range programs {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: k8s-node PROGRAM [ARGS...], or call it through a link named PROGRAM; PROGRAM is one of: %s\n", strings.Join(names, ", "))
	os.Exit(2)
}
