// Command cert-manager-controller runs cert-manager's own controllers for self-signed Issuers and
// Certificates, built from the github.com/cert-manager/cert-manager module. cert-manager's
// cmd/controller is a module of its own that the Go module proxy does not serve, so this is the
// smallest wiring of the library's controllers: their registry, context factory and informers.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"k8s.io/klog/v2"

	// Each import registers its controllers (or issuer type) in init.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The controllers a self-signed Issuer and its Certificates need to become Ready.
var controllers = []string{
	"issuers",
	"certificaterequests-approver",
	"certificaterequests-issuer-selfsigned",
	"certificates-trigger",
	"certificates-key-manager",
	"certificates-request-manager",
	"certificates-issuing",
	"certificates-readiness",
	"certificates-revision-manager",
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	namespace := flag.String("cluster-resource-namespace", "cert-manager", "namespace of ClusterIssuers' secrets")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background())
	log := klog.Background()

	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: *namespace},
		CertificateOptions: controllerpkg.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Minute,
			CertificateRequestMaximumBackoffDuration: time.Hour,
		},
	})
	if err != nil {
		log.Error(err, "cannot build the controller context")
		os.Exit(1)
	}
	var running sync.WaitGroup
	for _, name := range controllers {
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			log.Error(nil, "controller not registered", "name", name)
			os.Exit(1)
		}
		c, err := construct(factory)
		if err != nil {
			log.Error(err, "cannot construct controller", "name", name)
			os.Exit(1)
		}
		running.Add(1)
		go func() {
			defer running.Done()
			if err := c.Run(1, ctx); err != nil {
				log.Error(err, "controller stopped", "name", name)
				stop()
			}
		}()
	}
	// The controllers registered their informers while being constructed; start them all.
	shared, err := factory.Build()
	if err != nil {
		log.Error(err, "cannot build the controller context")
		os.Exit(1)
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	log.Info("cert-manager controllers started", "controllers", controllers)
	running.Wait()
}
